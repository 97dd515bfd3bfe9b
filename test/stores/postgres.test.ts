import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { after, before, describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import type { PatRecord } from '../../src/core/ports.ts'
import {
  openPostgresStore,
  type PostgresStore,
  type PostgresStoreOptions,
} from '../../src/stores/postgres.ts'
import { postgresMigrations } from '../../src/stores/postgres-migrations.ts'
import type { StoreChange } from '../../src/stores/store.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { storeContract } from './contract.ts'

const T0 = Date.UTC(2026, 0, 1)

function pat(id: string, tenantId = 'acme'): PatRecord {
  return {
    id,
    tokenHash: createHash('sha256').update(`pat_${id}`).digest('hex'),
    tenantId,
    subject: `user-${id}`,
    name: `token ${id}`,
    permissions: ['tokens:read'],
    last4: id.slice(-4).padStart(4, 'x'),
    createdAt: T0,
    expiresAt: null,
    revokedAt: null,
    lastUsedAt: null,
    rotatedFrom: null,
  }
}

/** Records every change a store delivers, and lets a test wait for a particular one. */
function recorder(store: PostgresStore) {
  const seen: { change: StoreChange; at: number }[] = []
  const waiters = new Set<() => void>()
  store.watch((change) => {
    seen.push({ change, at: performance.now() })
    for (const wake of [...waiters]) wake()
  })
  return {
    seen,
    /** Resolves with the arrival time of the first matching change at index >= `from`. */
    async waitFor(
      predicate: (change: StoreChange) => boolean,
      { from = 0, timeoutMs = 5000 } = {},
    ): Promise<number> {
      const deadline = performance.now() + timeoutMs
      for (;;) {
        const hit = seen.slice(from).find((entry) => predicate(entry.change))
        if (hit) return hit.at
        const left = deadline - performance.now()
        if (left <= 0) throw new Error('expected change was not delivered')
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, left)
          function done() {
            clearTimeout(timer)
            waiters.delete(done)
            resolve()
          }
          waiters.add(done)
        })
      }
    },
  }
}

async function until(check: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await sleep(25)
  }
}

async function adminQuery(url: string, sql: string, params: unknown[] = []) {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(sql, params)).rows
  } finally {
    await client.end()
  }
}

const skip = skipReason('postgres')

describe('postgres', { skip }, () => {
  let server: PostgresServer
  before(async () => {
    server = await startPostgres()
  })
  after(() => server?.stop())

  async function freshDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
    const url = await server.createDatabase()
    const name = new URL(url).pathname.slice(1)
    return {
      url,
      drop: async () => {
        await adminQuery(server.url, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      },
    }
  }

  storeContract('postgres', async () => {
    const { url, drop } = await freshDatabase()
    const store = await openPostgresStore(url, { poolSize: 4 })
    return {
      store,
      sql: (text) => adminQuery(url, text),
      cleanup: async () => {
        await store.close()
        await drop()
      },
    }
  })

  /** Opens `count` stores ("instances") on one fresh, migrated database. */
  async function instances(
    t: TestContext,
    count: number,
    options: PostgresStoreOptions = {},
  ): Promise<{ url: string; stores: PostgresStore[] }> {
    const { url, drop } = await freshDatabase()
    const stores: PostgresStore[] = []
    t.after(async () => {
      for (const store of stores) await store.close()
      await drop()
    })
    for (let i = 0; i < count; i++) stores.push(await openPostgresStore(url, options))
    await stores[0]?.migrate()
    return { url, stores }
  }

  describe('postgres store across instances', () => {
    it('a revocation on instance A reaches instance B within 1 s', async (t) => {
      const { stores } = await instances(t, 2)
      const [a, b] = stores as [PostgresStore, PostgresStore]
      await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
      const record = pat('p1')
      await a.insertPat(record)
      const onB = recorder(b)
      const start = performance.now()
      await a.revokePat('p1', T0 + 1)
      const arrived = await onB.waitFor((c) => c.kind === 'pat_changed')
      assert.ok(arrived - start < 1000, `took ${arrived - start} ms`)
      assert.deepEqual(
        onB.seen.map((entry) => entry.change).filter((c) => c.kind === 'pat_changed'),
        [{ kind: 'pat_changed', tokenHash: record.tokenHash }],
      )
    })

    it('a tenant disable on A reaches B within 1 s', async (t) => {
      const { stores } = await instances(t, 2)
      const [a, b] = stores as [PostgresStore, PostgresStore]
      await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
      const onB = recorder(b)
      const start = performance.now()
      await a.setTenantEnabled('acme', false)
      const arrived = await onB.waitFor((c) => c.kind === 'tenant_changed' && c.id === 'acme')
      assert.ok(arrived - start < 1000, `took ${arrived - start} ms`)
      assert.equal((await b.findTenant('acme'))?.enabled, false)
    })

    it('issuer put and remove on A reach B within 1 s each', async (t) => {
      const { stores } = await instances(t, 2)
      const [a, b] = stores as [PostgresStore, PostgresStore]
      const onB = recorder(b)
      const issuer = {
        issuer: 'https://idp.example',
        audiences: ['api'],
        keySource: { kind: 'jwks_url', url: 'https://idp.example/jwks' },
      } as const
      let start = performance.now()
      await a.putIssuer(issuer, T0)
      let arrived = await onB.waitFor((c) => c.kind === 'issuers_changed')
      assert.ok(arrived - start < 1000, `put took ${arrived - start} ms`)
      start = performance.now()
      await a.removeIssuer(issuer.issuer)
      arrived = await onB.waitFor((c) => c.kind === 'issuers_changed', { from: 1 })
      assert.ok(arrived - start < 1000, `remove took ${arrived - start} ms`)
      assert.equal(onB.seen.length, 2)
    })

    it("an instance's own change is delivered once, before its call resolves", async (t) => {
      // No catch-up poll: each instance then reads the log only after its own change and when
      // NOTIFY wakes it, so every wait below is for an observable event, never a sleep.
      const { url, stores } = await instances(t, 2, { changePollMs: 0 })
      const [a, b] = stores as [PostgresStore, PostgresStore]
      const head = async () =>
        (await adminQuery(url, 'SELECT max(seq)::int AS seq FROM change_log'))[0]?.seq as number
      await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
      // Logged before anyone watches: a watcher is owed what is logged after it subscribes, and
      // an earlier change reaches it only if the NOTIFY-woken read happens to run after the
      // subscription. Wait until both instances have applied it, so it is delivered to nobody.
      const created = await head()
      await until(() => a.changeFeed.lastSeq === created && b.changeFeed.lastSeq === created)
      const onA = recorder(a)
      const onB = recorder(b)
      const applied = (seen: typeof onA.seen) => seen.map((entry) => entry.change.kind)

      await a.setTenantEnabled('acme', false)
      assert.deepEqual(applied(onA.seen), ['tenant_changed'], 'delivered before the call resolved')
      await onB.waitFor((c) => c.kind === 'tenant_changed')

      // A's own change also reaches A's listening connection as a NOTIFY; its wake-up read must
      // deliver nothing again. B's change after it is notified to A after it (one session gets
      // notifications in commit order), so once A has applied B's change, the wake-up for its
      // own has been handled too.
      await b.setTenantEnabled('acme', true)
      const last = await head()
      assert.equal(last, created + 2)
      await until(() => a.changeFeed.lastSeq === last)
      assert.deepEqual(applied(onA.seen), ['tenant_changed', 'tenant_changed'], 'each change once')
      assert.deepEqual(applied(onB.seen), ['tenant_changed', 'tenant_changed'])
    })

    it('a mutation that matches no row logs nothing', async (t) => {
      const { url, stores } = await instances(t, 2)
      const [a, b] = stores as [PostgresStore, PostgresStore]
      await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
      const before = await adminQuery(url, 'SELECT count(*)::int AS n FROM change_log')
      assert.equal(await a.setTenantEnabled('nobody', false), undefined)
      assert.equal(await a.revokePat('nobody', T0), undefined)
      assert.equal(await a.removeIssuer('https://nobody.example'), false)
      assert.equal((await a.setTenantEnabled('acme', true))?.enabled, true)
      const after = await adminQuery(url, 'SELECT count(*)::int AS n FROM change_log')
      assert.deepEqual(after, before, 'an update to the same values is no change either')
      const onB = recorder(b)
      await a.setTenantEnabled('acme', false)
      await onB.waitFor((c) => c.kind === 'tenant_changed')
      assert.ok(onB.seen.every((entry) => entry.change.kind === 'tenant_changed'))
    })

    it('LISTEN connection killed just before a revoke: B still applies it (< 1 s), then re-subscribes', async (t) => {
      const { url, stores } = await instances(t, 2)
      const [a, b] = stores as [PostgresStore, PostgresStore]
      await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
      await a.insertPat(pat('p1'))
      await a.insertPat(pat('p2'))
      const onB = recorder(b)
      const pid = b.changeFeed.backendPid
      assert.ok(pid, 'B is listening')
      assert.equal(b.changeFeed.connected, true)

      const [row] = await adminQuery(url, 'SELECT pg_terminate_backend($1) AS ok', [pid])
      assert.equal(row?.ok, true)
      const revokedAt = performance.now()
      await a.revokePat('p1', T0 + 1)
      const arrived = await onB.waitFor((c) => c.kind === 'pat_changed', { timeoutMs: 2000 })
      t.diagnostic(
        `revoke during a killed LISTEN → B applied it after ${(arrived - revokedAt).toFixed(1)} ms`,
      )
      assert.ok(arrived - revokedAt < 1000, `${arrived - revokedAt} ms`)
      assert.ok(!onB.seen.some((entry) => entry.change.kind === 'resync'), 'no cache was dropped')

      await until(() => b.changeFeed.connected && b.changeFeed.backendPid !== pid)
      const from = onB.seen.length
      await a.revokePat('p2', T0 + 2)
      await onB.waitFor((c) => c.kind === 'pat_changed' && c.tokenHash === pat('p2').tokenHash, {
        from,
        timeoutMs: 1000,
      })
    })

    it('changes are applied in sequence order even when the NOTIFY never arrives (poll only)', async (t) => {
      // listenUrl on a port nothing listens on would fail the open; a dead LISTEN is what
      // PgBouncer in transaction mode amounts to, which test/scale/pgbouncer.test.ts runs.
      const { url, stores } = await instances(t, 1, { changePollMs: 100 })
      const [a] = stores as [PostgresStore]
      const b = await openPostgresStore(url, { changePollMs: 100 })
      t.after(() => b.close())
      const onB = recorder(b)
      const pid = b.changeFeed.backendPid
      // Stopped, not killed: the connection stays open and deaf until the heartbeat notices.
      process.kill(Number(pid), 'SIGSTOP')
      try {
        await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
        for (let i = 0; i < 20; i++) await a.insertPat(pat(`q${i}`))
        for (let i = 0; i < 20; i++) await a.revokePat(`q${i}`, T0 + i)
        await until(() => onB.seen.filter((e) => e.change.kind === 'pat_changed').length === 20)
      } finally {
        process.kill(Number(pid), 'SIGCONT')
      }
      assert.deepEqual(
        onB.seen.map((e) => e.change).filter((c) => c.kind === 'pat_changed'),
        Array.from({ length: 20 }, (_, i) => ({
          kind: 'pat_changed',
          tokenHash: pat(`q${i}`).tokenHash,
        })),
      )
    })

    it('concurrent migrate() from 3 instances applies each version exactly once', async (t) => {
      const { url, drop } = await freshDatabase()
      const stores = await Promise.all([1, 2, 3].map(() => openPostgresStore(url)))
      t.after(async () => {
        for (const store of stores) await store.close()
        await drop()
      })
      const results = await Promise.all(stores.map((store) => store.migrate()))
      const applied = results.flat().sort((x, y) => x - y)
      const [first] = results.filter((r) => r.length > 0)
      assert.ok(first, 'one instance applied the migrations')
      assert.deepEqual(applied, first, 'no version applied twice')
      assert.equal(results.filter((r) => r.length === 0).length, 2)
      const rows = await adminQuery(url, 'SELECT version FROM schema_migrations ORDER BY version')
      assert.deepEqual(
        rows.map((r) => r.version),
        first,
      )
      // Every instance can use the schema right away.
      for (const [i, store] of stores.entries()) {
        await store.createTenant({ id: `tenant-${i}`, name: 'T' }, T0)
      }
    })

    it('migrate refuses a database migrated by a newer version', async (t) => {
      const { url, stores } = await instances(t, 1)
      await adminQuery(url, 'INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)')
      await assert.rejects((stores[0] as PostgresStore).migrate(), /newer/)
    })

    it('migration 4 makes the audit tenant index partial, keeping every event', async (t) => {
      // A database at version 3, as the previous release left it, with events of both kinds.
      const { url, drop } = await freshDatabase()
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      let store: PostgresStore | undefined
      t.after(async () => {
        await store?.close()
        await client.end()
        await drop()
      })
      await client.query(
        'CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)',
      )
      for (const migration of postgresMigrations.filter((m) => m.version <= 3)) {
        await client.query(migration.sql)
        await client.query('INSERT INTO schema_migrations VALUES ($1, 0)', [migration.version])
      }
      await client.query(
        `INSERT INTO audit_events (id, time, type, tenant_id, outcome)
        SELECT 'e' || lpad(i::text, 2, '0'), $1::bigint + i, 'auth.failed',
          CASE WHEN i % 3 = 0 THEN 'acme' END, 'invalid_token'
        FROM generate_series(0, 29) AS i`,
        [T0],
      )
      store = await openPostgresStore(url)
      assert.deepEqual((await store.migrate())[0], 4)
      const [index] = await adminQuery(
        url,
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'audit_events_tenant_time'",
      )
      assert.match(
        String(index?.indexdef),
        /\(tenant_id, "time", id\) WHERE \(tenant_id IS NOT NULL\)$/,
      )
      const { items } = await store.listAudit('acme', { limit: 100 })
      assert.deepEqual(
        items.map((e) => e.id),
        ['e27', 'e24', 'e21', 'e18', 'e15', 'e12', 'e09', 'e06', 'e03', 'e00'],
      )
      const [count] = await adminQuery(url, 'SELECT count(*)::int AS n FROM audit_events')
      assert.equal(count?.n, 30)
    })

    it('listAudit pages use the partial tenant index, generic plans included', async (t) => {
      const { url, stores } = await instances(t, 1)
      const store = stores[0] as PostgresStore
      // Mostly tenant-less events (a 401 flood), a few per tenant.
      const events = Array.from({ length: 5000 }, (_, i) => ({
        id: `e${String(i).padStart(5, '0')}`,
        time: T0 + i,
        type: 'auth.failed',
        tenantId: i % 50 === 0 ? `tenant-${i % 7}` : null,
        actor: null,
        outcome: 'invalid_token',
        clientAddress: null,
        requestId: null,
        details: {},
      }))
      await store.appendAudit(events, { queue: false })
      // Ended in this test: the database is dropped (WITH FORCE) by an earlier after-hook.
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      try {
        await client.query('ANALYZE audit_events')
        // Checked on generic plans, the hardest case: with no value for $1, only the strictness
        // of `=` (NULL never matches) proves the WHERE tenant_id IS NOT NULL of the index.
        // Custom plans (the store's unnamed statements) also see the value.
        await client.query('SET plan_cache_mode = force_generic_plan')
        await client.query(`PREPARE first_page (text, bigint) AS
        SELECT * FROM audit_events WHERE tenant_id = $1 ORDER BY time DESC, id DESC LIMIT $2`)
        await client.query(`PREPARE next_page (text, bigint, text, bigint) AS
        SELECT * FROM audit_events WHERE tenant_id = $1 AND (time, id) < ($2::bigint, $3::text)
        ORDER BY time DESC, id DESC LIMIT $4`)
        for (const execute of [
          "EXECUTE first_page ('tenant-1', 11)",
          "EXECUTE next_page ('tenant-1', 1767225603000, 'e03000', 11)",
        ]) {
          const rows = await client.query(`EXPLAIN ${execute}`)
          const plan = rows.rows.map((r) => r['QUERY PLAN']).join('\n')
          assert.match(plan, /Index Scan Backward using audit_events_tenant_time/, plan)
          assert.doesNotMatch(plan, /Sort|Seq Scan/, plan)
        }
      } finally {
        await client.end()
      }
    })

    it('a throwing watch listener neither fails the write nor starves other listeners', async (t) => {
      const warnings: string[] = []
      const logger = { warn: (_obj: object, msg: string) => warnings.push(msg) }
      const { url, stores } = await instances(t, 2, { logger, changePollMs: 0 })
      const [a, b] = stores as [PostgresStore, PostgresStore]
      await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
      // The creation is applied by both before anyone watches (whether a watcher attached now
      // would still get it depends on when the NOTIFY-woken read runs): only the disable counts.
      const [{ seq: created }] = (await adminQuery(
        url,
        'SELECT max(seq)::int AS seq FROM change_log',
      )) as [{ seq: number }]
      await until(() => a.changeFeed.lastSeq === created && b.changeFeed.lastSeq === created)
      for (const store of [a, b]) {
        store.watch(() => {
          throw new Error('listener bug')
        })
      }
      const onA = recorder(a)
      const onB = recorder(b)
      assert.equal((await a.setTenantEnabled('acme', false))?.enabled, false)
      assert.equal(onA.seen.length, 1, 'the disable, before the call resolved')
      await until(() => onB.seen.length === 1)
      assert.equal(warnings.length, 2, warnings.join(' | '))
      assert.ok(warnings.every((w) => w === 'store watch listener threw'))
    })

    it('listen: false opens no listening connection; own changes are still delivered', async (t) => {
      const { url, stores } = await instances(t, 1)
      const [a] = stores as [PostgresStore]
      const quiet = await openPostgresStore(url, { listen: false })
      t.after(() => quiet.close())
      assert.equal(quiet.changeFeed.connected, false)
      assert.equal(quiet.changeFeed.backendPid, undefined)
      await quiet.ping()
      const onQuiet = recorder(quiet)
      const onA = recorder(a)
      await quiet.createTenant({ id: 'acme', name: 'Acme' }, T0)
      await quiet.setTenantEnabled('acme', false)
      assert.deepEqual(
        onQuiet.seen.map((entry) => entry.change),
        [
          { kind: 'tenant_changed', id: 'acme' },
          { kind: 'tenant_changed', id: 'acme' },
        ],
      )
      // The notification still goes out to instances that do listen.
      await onA.waitFor((c) => c.kind === 'tenant_changed')
    })

    it('revocation propagation over 100 revocations (median and max)', async (t) => {
      const { stores } = await instances(t, 2)
      const [a, b] = stores as [PostgresStore, PostgresStore]
      await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
      for (let i = 0; i < 100; i++) await a.insertPat(pat(`p${i}`))
      const onB = recorder(b)
      const latencies: number[] = []
      for (let i = 0; i < 100; i++) {
        const from = onB.seen.length
        const start = performance.now()
        await a.revokePat(`p${i}`, T0 + i)
        const hash = pat(`p${i}`).tokenHash
        const arrived = await onB.waitFor((c) => c.kind === 'pat_changed' && c.tokenHash === hash, {
          from,
        })
        latencies.push(arrived - start)
      }
      latencies.sort((x, y) => x - y)
      const median = ((latencies[49] as number) + (latencies[50] as number)) / 2
      const max = latencies[99] as number
      t.diagnostic(
        `revocation A -> B over 100 revocations: median ${median.toFixed(2)} ms, max ${max.toFixed(2)} ms`,
      )
      assert.ok(max < 1000, `slowest propagation ${max} ms`)
    })
  })

  describe('postgres store through a server outage', () => {
    // A server of its own: halting the shared one would disturb the other suites.
    let outage: PostgresServer
    before(async () => {
      outage = await startPostgres()
    })
    after(() => outage?.stop())

    it('methods reject while the server is down, and the same store recovers after', async (t) => {
      const url = await outage.createDatabase()
      const options = { changeFeed: { reconnectMaxMs: 500 } }
      const a = await openPostgresStore(url, options)
      const b = await openPostgresStore(url, options)
      t.after(async () => {
        await outage.start()
        await a.close()
        await b.close()
      })
      await a.migrate()
      await a.createTenant({ id: 'acme', name: 'Acme' }, T0)
      await a.insertPat(pat('p1'))
      await a.insertPat(pat('p2'))
      const onB = recorder(b)

      await outage.halt('fast')
      await assert.rejects(a.ping())
      await assert.rejects(a.findTenant('acme'))
      await assert.rejects(a.revokePat('p1', T0 + 1))
      await assert.rejects(b.findPatByHash(pat('p1').tokenHash))
      // B cannot read the log: it drops its caches (PATs then fail closed).
      await onB.waitFor((c) => c.kind === 'resync')
      assert.equal(b.changeFeed.connected, false)
      assert.equal(b.changeFeed.current, false)

      await outage.start()
      await until(async () => {
        try {
          await a.ping()
          return true
        } catch {
          return false
        }
      })
      assert.equal((await a.findTenant('acme'))?.name, 'Acme')
      assert.equal((await b.findPatByHash(pat('p1').tokenHash))?.revokedAt, null)

      // B's feed re-subscribed by itself, caught up, and hears A again.
      await until(() => b.changeFeed.connected && b.changeFeed.current === true)
      const from = onB.seen.length
      await a.revokePat('p2', T0 + 2)
      const hash = pat('p2').tokenHash
      await onB.waitFor((c) => c.kind === 'pat_changed' && c.tokenHash === hash, { from })
      assert.equal(onB.seen.filter((entry) => entry.change.kind === 'resync').length, 1)
    })

    it('opening a store while the server is down rejects', async () => {
      const url = await outage.createDatabase()
      await outage.halt('fast')
      try {
        await assert.rejects(openPostgresStore(url))
      } finally {
        await outage.start()
      }
      const store = await openPostgresStore(url)
      await store.ping()
      await store.close()
    })
  })
})
