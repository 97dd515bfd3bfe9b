import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, describe, it } from 'node:test'
import { Worker } from 'node:worker_threads'
import type { PatRecord } from '../../src/core/ports.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { sqliteMigrations } from '../../src/stores/sqlite-migrations.ts'
import { storeContract } from './contract.ts'

const root = mkdtempSync(join(tmpdir(), 'tokengate-sqlite-'))
after(() => rmSync(root, { recursive: true, force: true }))
let counter = 0

function freshPath(): string {
  counter += 1
  return join(root, `store-${counter}.db`)
}

storeContract('sqlite', async () => {
  const path = freshPath()
  const store = openSqliteStore(path)
  return {
    store,
    // Another connection on the file, as the sqlite3 shell would be.
    sql: async (text) => {
      const db = new DatabaseSync(path)
      try {
        return db.prepare(text).all() as Record<string, unknown>[]
      } finally {
        db.close()
      }
    },
    cleanup: async () => {
      await store.close()
      rmSync(path, { force: true })
      rmSync(`${path}-wal`, { force: true })
      rmSync(`${path}-shm`, { force: true })
    },
  }
})

const T0 = Date.UTC(2026, 0, 1)

function record(i: number, tenantId = 'acme'): PatRecord {
  return {
    id: `pat-${i}`,
    tokenHash: createHash('sha256').update(`pat_token_${i}`).digest('hex'),
    tenantId,
    subject: `user-${i % 97}`,
    name: `token ${i}`,
    permissions: ['tokens:read'],
    last4: String(i % 10_000).padStart(4, '0'),
    createdAt: T0 + i,
    expiresAt: i % 2 === 0 ? T0 + 86_400_000 + i : null,
    revokedAt: null,
    lastUsedAt: null,
    rotatedFrom: null,
  }
}

function auditEvent(id: string) {
  return {
    id,
    time: T0,
    type: 'auth.failed',
    tenantId: 'acme',
    actor: null,
    outcome: 'invalid_token',
    clientAddress: null,
    requestId: null,
    details: {},
  }
}

describe('sqlite store specifics', () => {
  it('puts the database in WAL mode, with foreign keys on', async (t) => {
    const path = freshPath()
    const store = openSqliteStore(path)
    t.after(() => store.close())
    await store.migrate()
    // The journal mode is a property of the file: another connection sees it too.
    const raw = new DatabaseSync(path, { readOnly: true })
    t.after(() => raw.close())
    assert.equal(raw.prepare('PRAGMA journal_mode').get()?.journal_mode, 'wal')
    await assert.rejects(store.insertPat(record(1, 'no-such-tenant')), /unknown tenant/)
  })

  it('records the schema version in schema_migrations with the injected clock', async (t) => {
    const path = freshPath()
    const store = openSqliteStore(path, { clock: { now: () => 1234 } })
    t.after(() => store.close())
    const applied = await store.migrate()
    const raw = new DatabaseSync(path, { readOnly: true })
    t.after(() => raw.close())
    const rows = raw.prepare('SELECT version, applied_at FROM schema_migrations').all()
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      applied.map((version) => ({ version, applied_at: 1234 })),
    )
  })

  it('refuses to work before migrate(), with a message that says so', async (t) => {
    const store = openSqliteStore(freshPath())
    t.after(() => store.close())
    await store.ping()
    await assert.rejects(store.findTenant('acme'), /run migrate\(\)/)
    await store.migrate()
    assert.equal(await store.findTenant('acme'), undefined)
  })

  it('refuses a database whose schema is newer than this code', async (t) => {
    const path = freshPath()
    const store = openSqliteStore(path)
    t.after(() => store.close())
    await store.migrate()
    const raw = new DatabaseSync(path)
    raw.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)').run()
    raw.close()
    await assert.rejects(store.migrate(), /newer than this tokengate/)
    const other = openSqliteStore(path)
    t.after(() => other.close())
    await assert.rejects(other.findTenant('acme'), /version 999/)
  })

  it('two store objects on one file (CLI and server) see each other’s writes', async (t) => {
    const path = freshPath()
    const server = openSqliteStore(path)
    const cli = openSqliteStore(path)
    t.after(() => server.close())
    t.after(() => cli.close())
    // Both migrate, as a CLI and a starting server may: only the first applies anything.
    const [a, b] = await Promise.all([server.migrate(), cli.migrate()])
    assert.deepEqual(
      [...a, ...b],
      sqliteMigrations.map((m) => m.version),
    )

    await cli.createTenant({ id: 'acme', name: 'Acme' }, T0)
    await cli.insertPat(record(1))
    const seen = await server.findPatByHash(record(1).tokenHash)
    assert.equal(seen?.id, 'pat-1')

    await cli.revokePat('pat-1', T0 + 5)
    assert.equal((await server.findPatByHash(record(1).tokenHash))?.revokedAt, T0 + 5)
    await server.recordPatUse(new Map([['pat-1', T0 + 9]]))
    assert.equal((await cli.getPat('pat-1'))?.lastUsedAt, T0 + 9)
    await server.setTenantEnabled('acme', false)
    assert.equal((await cli.findTenant('acme'))?.enabled, false)
  })

  it('watch delivers another connection’s commits by sequence, and its own writes once', async (t) => {
    const path = freshPath()
    const server = openSqliteStore(path, { externalChangePollMs: 20 })
    const cli = openSqliteStore(path)
    t.after(() => server.close())
    t.after(() => cli.close())
    await server.migrate()
    const changes: string[] = []
    const unwatch = server.watch((change) =>
      changes.push(
        change.kind === 'pat_changed' ? `pat ${change.tokenHash.slice(0, 6)}` : change.kind,
      ),
    )
    await server.createTenant({ id: 'acme', name: 'Acme' }, T0)
    assert.deepEqual(changes, ['tenant_changed'], 'delivered before createTenant resolved')
    // A read that starts after the call (what the poll runs): waited on, not slept for, so a
    // loaded machine cannot make these checks pass early or fail late.
    await server.catchUpChanges()
    assert.deepEqual(changes, ['tenant_changed'], 'and not again by the next read')

    await cli.insertPat(record(1))
    await cli.insertPat(record(2))
    await cli.revokePat('pat-2', T0 + 1)
    await cli.revokePat('pat-1', T0 + 1)
    await server.catchUpChanges()
    const hash = (i: number) => `pat ${record(i).tokenHash.slice(0, 6)}`
    assert.deepEqual(changes, ['tenant_changed', hash(2), hash(1)], 'precise, in commit order')

    unwatch()
    changes.length = 0
    await cli.setTenantEnabled('acme', false)
    await new Promise((resolve) => setTimeout(resolve, 100))
    assert.deepEqual(changes, [], 'no polling once the last listener is gone')
  })

  it('a write waits for another connection’s write lock instead of failing', async (t) => {
    const path = freshPath()
    const store = openSqliteStore(path)
    t.after(() => store.close())
    await store.migrate()
    // Another "process" (a worker thread with its own connection) holds the write lock
    // for 200 ms, as the CLI may while the server runs.
    const worker = new Worker(
      `const { DatabaseSync } = require('node:sqlite')
      const { parentPort, workerData } = require('node:worker_threads')
      const db = new DatabaseSync(workerData)
      db.exec('BEGIN IMMEDIATE')
      db.exec("INSERT INTO tenants (id, name, enabled, created_at) VALUES ('cli', 'CLI', 1, 0)")
      parentPort.postMessage('locked')
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200)
      db.exec('COMMIT')
      db.close()`,
      { eval: true, workerData: path },
    )
    t.after(() => worker.terminate())
    await new Promise((resolve) => worker.once('message', resolve))
    await store.createTenant({ id: 'server', name: 'Server' }, T0)
    assert.deepEqual(
      (await store.listTenants()).map((tenant) => tenant.id),
      ['cli', 'server'],
    )
  })

  it('a write lock held longer than the busy timeout is a rejection, not a hang', async (t) => {
    const path = freshPath()
    const store = openSqliteStore(path, { busyTimeoutMs: 20 })
    t.after(() => store.close())
    await store.migrate()
    const other = new DatabaseSync(path)
    other.exec('BEGIN IMMEDIATE')
    await assert.rejects(store.createTenant({ id: 'a', name: 'A' }, T0), /locked/)
    await assert.rejects(store.appendAudit([auditEvent('e1')]), /locked/)
    other.exec('ROLLBACK')
    other.close()
    await store.createTenant({ id: 'a', name: 'A' }, T0)
    await store.appendAudit([auditEvent('e1')])
    assert.equal((await store.listAudit('acme', { limit: 5 })).items.length, 1)
  })

  it('watch delivers changes through the same object at once, others’ at the next poll', async (t) => {
    const path = freshPath()
    const server = openSqliteStore(path)
    const cli = openSqliteStore(path)
    t.after(() => server.close())
    t.after(() => cli.close())
    await server.migrate()
    await cli.createTenant({ id: 'acme', name: 'Acme' }, T0)
    const onServer: string[] = []
    const onCli: string[] = []
    server.watch((c) => onServer.push(c.kind))
    cli.watch((c) => onCli.push(c.kind))
    await cli.setTenantEnabled('acme', false)
    assert.deepEqual(onCli, ['tenant_changed'])
    const deadline = Date.now() + 2000
    while (onServer.length === 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20))
    assert.deepEqual(onServer, ['tenant_changed'])
  })

  it('a listener that throws does not fail the write', async (t) => {
    const store = openSqliteStore(freshPath())
    t.after(() => store.close())
    await store.migrate()
    await store.createTenant({ id: 'acme', name: 'Acme' }, T0)
    const warnings: string[] = []
    const onWarning = (w: Error) => warnings.push(w.message)
    process.on('warning', onWarning)
    t.after(() => process.off('warning', onWarning))
    store.watch(() => {
      throw new Error('listener bug')
    })
    const seen: string[] = []
    store.watch((c) => seen.push(c.kind))
    assert.equal((await store.setTenantEnabled('acme', false))?.enabled, false)
    assert.deepEqual(seen, ['tenant_changed'])
    await new Promise((resolve) => setImmediate(resolve))
    assert.ok(warnings.some((w) => w.includes('listener bug')))
  })

  it('insertPats is all or nothing', async (t) => {
    const store = openSqliteStore(freshPath())
    t.after(() => store.close())
    await store.migrate()
    await store.createTenant({ id: 'acme', name: 'Acme' }, T0)
    await store.insertPat(record(3))
    await assert.rejects(store.insertPats([record(1), record(2), record(3)]), {
      name: 'ConflictError',
    })
    assert.equal(await store.getPat('pat-1'), undefined)
    assert.equal(await store.getPat('pat-2'), undefined)
  })

  it('inside a transaction a failing method undoes its own writes only (a savepoint)', async (t) => {
    const store = openSqliteStore(freshPath())
    t.after(() => store.close())
    await store.migrate()
    await store.createTenant({ id: 'acme', name: 'Acme' }, T0)
    await store.insertPat(record(1))
    await store.insertPat(record(2))
    await store.transaction(async (tx) => {
      // The replacement's id is taken: the old token's supersede is undone with it.
      const replacement = { ...record(2), tokenHash: 'f'.repeat(64), rotatedFrom: 'pat-1' }
      await assert.rejects(tx.rotatePat('pat-1', replacement, T0, T0), { name: 'ConflictError' })
      await tx.revokePat('pat-2', T0)
    })
    assert.equal((await store.getPat('pat-1'))?.supersededAt, null)
    assert.equal((await store.getPat('pat-2'))?.revokedAt, T0)
  })

  it('rejects page limits outside 1..1000', async (t) => {
    const store = openSqliteStore(freshPath())
    t.after(() => store.close())
    await store.migrate()
    for (const limit of [0, -1, 1.5, 1001, Number.NaN]) {
      await assert.rejects(store.listPats('acme', { limit }), RangeError, String(limit))
      await assert.rejects(store.listAudit('acme', { limit }), RangeError, String(limit))
    }
  })

  it('uses the indexes for hash lookup and keyset pages', async (t) => {
    const path = freshPath()
    const store = openSqliteStore(path)
    t.after(() => store.close())
    await store.migrate()
    const raw = new DatabaseSync(path, { readOnly: true })
    t.after(() => raw.close())
    const plan = (sql: string) =>
      raw
        .prepare(`EXPLAIN QUERY PLAN ${sql}`)
        .all()
        .map((r) => String(r.detail))
        .join('\n')
    assert.match(plan("SELECT * FROM pats WHERE token_hash = 'x'"), /USING INDEX/)
    const pagePlan = plan(`SELECT * FROM pats WHERE tenant_id = 'a' AND (created_at, id) < (1, 'x')
      ORDER BY created_at DESC, id DESC LIMIT 11`)
    assert.match(pagePlan, /pats_by_tenant_newest/)
    assert.doesNotMatch(pagePlan, /TEMP B-TREE/)
    // listAudit's two statements, parameters as the store binds them: `tenant_id = $tenant`
    // implies NOT NULL, so the partial index (migration 4) serves both, already in order.
    for (const after of ['', 'AND (time, id) < ($at, $id)']) {
      const auditPlan = plan(`SELECT * FROM audit_events WHERE tenant_id = $tenant ${after}
        ORDER BY time DESC, id DESC LIMIT $limit`)
      assert.match(auditPlan, /SEARCH audit_events USING INDEX audit_events_by_tenant_newest/)
      assert.doesNotMatch(auditPlan, /TEMP B-TREE/)
    }
  })

  it('migration 4 makes the audit tenant index partial, keeping every event', async (t) => {
    const path = freshPath()
    // A database at version 3, as the previous release left it, with events of both kinds.
    const old = new DatabaseSync(path)
    old.exec(`CREATE TABLE schema_migrations (
      version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`)
    for (const migration of sqliteMigrations.filter((m) => m.version <= 3)) {
      old.exec(migration.sql)
      old.prepare('INSERT INTO schema_migrations VALUES (?, 0)').run(migration.version)
    }
    const insert = old.prepare(`INSERT INTO audit_events
      (id, time, type, tenant_id, actor, outcome, client_address, request_id, details)
      VALUES (?, ?, 'auth.failed', ?, NULL, 'invalid_token', NULL, NULL, '{}')`)
    for (let i = 0; i < 30; i++)
      insert.run(`e${String(i).padStart(2, '0')}`, T0 + i, i % 3 ? null : 'acme')
    old.close()

    const store = openSqliteStore(path)
    t.after(() => store.close())
    assert.deepEqual((await store.migrate())[0], 4)
    const raw = new DatabaseSync(path, { readOnly: true })
    t.after(() => raw.close())
    const index = raw
      .prepare("SELECT sql FROM sqlite_master WHERE name = 'audit_events_by_tenant_newest'")
      .get()
    assert.match(String(index?.sql), /WHERE tenant_id IS NOT NULL$/)
    assert.equal(raw.prepare('SELECT count(*) AS n FROM audit_events').get()?.n, 30)
    const { items } = await store.listAudit('acme', { limit: 100 })
    assert.deepEqual(
      items.map((e) => e.id),
      ['e27', 'e24', 'e21', 'e18', 'e15', 'e12', 'e09', 'e06', 'e03', 'e00'],
    )
  })

  it('50,000 tokens: lookups by hash, by id and deep pages still work', async (t) => {
    const store = openSqliteStore(freshPath())
    t.after(() => store.close())
    await store.migrate()
    await store.createTenant({ id: 'acme', name: 'Acme' }, T0)
    await store.createTenant({ id: 'other', name: 'Other' }, T0)
    const total = 50_000
    const batch: PatRecord[] = []
    for (let i = 0; i < total; i++) {
      batch.push(record(i, i % 10 === 0 ? 'other' : 'acme'))
      if (batch.length === 5000) await store.insertPats(batch.splice(0))
    }
    for (const i of [0, 1, 12_345, 49_999]) {
      const found = await store.findPatByHash(record(i).tokenHash)
      assert.equal(found?.id, `pat-${i}`)
      assert.equal(found?.tenantId, i % 10 === 0 ? 'other' : 'acme')
    }
    assert.equal(await store.findPatByHash(record(total).tokenHash), undefined)
    assert.equal((await store.getPat('pat-31337'))?.subject, `user-${31_337 % 97}`)

    // The first page is the newest; a cursor deep inside continues right after it.
    const first = await store.listPats('other', { limit: 3 })
    assert.deepEqual(
      first.items.map((r) => r.id),
      ['pat-49990', 'pat-49980', 'pat-49970'],
    )
    let cursor = first.nextCursor ?? undefined
    let seen = first.items.length
    while (cursor !== undefined) {
      const page = await store.listPats('other', { limit: 1000, cursor })
      seen += page.items.length
      cursor = page.nextCursor ?? undefined
    }
    assert.equal(seen, total / 10)
  })
})
