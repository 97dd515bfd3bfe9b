/**
 * The JWT revocation rules are read with the change log's head in one snapshot, and the log is
 * followed from that head: a rule written by another process between the whole read and the
 * moment this process starts following the log is in force within the log's delivery time
 * (under a second), not at a later re-read. And while the rules cannot be read, /readyz says so.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { describe, it } from 'node:test'
import pino from 'pino'
import { createAuthContext } from '../../src/auth/auth-context.ts'
import { loadConfig } from '../../src/config/load.ts'
import type { JwtRevocationRule } from '../../src/core/jwt-revocations.ts'
import { systemClock } from '../../src/core/ports.ts'
import { buildServer } from '../../src/server/server.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import type { Store } from '../../src/stores/store.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const HOUR = 3_600_000

function rule(id: string, value: string): JwtRevocationRule {
  const now = Date.now()
  return {
    id,
    issuer: 'https://idp.example/',
    kind: 'sub',
    value,
    issuedBefore: now,
    reason: null,
    createdAt: now,
    createdBy: 'cli:ops',
    expiresAt: now + HOUR,
  }
}

function freshConfig() {
  const dataDir = tempDir('tg-jwt-snapshot-')
  return loadConfig({ env: {}, overrides: { dev: true, dataDir, server: { plainHttp: true } } })
}

/**
 * The instance's store, with `afterRead` run once, right after its first whole read of the
 * rules answered and before that read's result is used: another process writing then.
 */
function withWriteAfterFirstRead(store: Store, afterRead: () => Promise<void>): Store {
  let done = false
  return new Proxy(store, {
    get(target, name) {
      const value = Reflect.get(target, name, target)
      if (typeof value !== 'function') return value
      if (name !== 'listJwtRevocations' && name !== 'snapshotJwtRevocations') {
        return value.bind(target)
      }
      return async (...args: unknown[]) => {
        const result = await value.apply(target, args)
        if (!done) {
          done = true
          await afterRead()
        }
        return result
      }
    },
  })
}

async function waitFor(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return true
}

describe('JWT revocation rules: one snapshot with the change log head', () => {
  it('a rule written between the whole read and the start of following the log is in force within 1 s', async (t) => {
    const config = freshConfig()
    const file = join(config.dataDir, 'tokengate.db')
    const instance = openSqliteStore(file)
    const cli = openSqliteStore(file)
    t.after(() => cli.close())
    await instance.migrate()
    const late = rule('r-late', 'written-meanwhile')
    const store = withWriteAfterFirstRead(instance, async () => {
      await cli.putJwtRevocation(late)
    })
    const auth = await createAuthContext(config, store, systemClock, pino({ level: 'silent' }))
    t.after(() => auth.close().then(() => instance.close()))
    // The promise of the change log: under a second everywhere (the old code re-read the
    // rules 2 s after start to catch this one).
    const found = await waitFor(() => auth.revocations.rules().some((r) => r.id === late.id), 1000)
    assert.ok(found, 'the rule written between the whole read and the follow is in force')
    // And one written after is followed as always.
    const later = rule('r-later', 'written-after')
    await cli.putJwtRevocation(later)
    assert.ok(await waitFor(() => auth.revocations.rules().some((r) => r.id === later.id), 1000))
  })

  it('snapshotJwtRevocations reads the rules in force and the change log head together', async (t) => {
    const config = freshConfig()
    const store = openSqliteStore(join(config.dataDir, 'tokengate.db'))
    t.after(() => store.close())
    await store.migrate()
    const empty = await store.snapshotJwtRevocations(Date.now())
    assert.deepEqual(empty.rules, [])
    await store.putJwtRevocation(rule('r1', 'a'))
    await store.putJwtRevocation({ ...rule('r2', 'b'), expiresAt: Date.now() - 1 })
    const snapshot = await store.snapshotJwtRevocations(Date.now())
    assert.deepEqual(
      snapshot.rules.map((r) => r.id),
      ['r1'],
    )
    assert.equal(snapshot.head, empty.head + 2, 'both writes are logged before the head read')
  })

  it('/readyz: degraded with jwtRevocations "stale" and since when while the rules cannot be read; ready again once they can', async (t) => {
    const config = freshConfig()
    const file = join(config.dataDir, 'tokengate.db')
    const store = openSqliteStore(file)
    await store.migrate()
    const auth = await createAuthContext(config, store, systemClock, pino({ level: 'silent' }))
    const app = await buildServer({ config, auth, logger: pino({ level: 'silent' }) })
    t.after(() => app.close().then(() => store.close()))
    const ready = async () => (await app.inject({ url: '/readyz' })).json()
    assert.equal((await ready()).status, 'ready')
    assert.equal((await ready()).checks.jwtRevocations, 'ok')

    // The rules table goes away under the running instance (the store itself still answers),
    // and the change log names a rule: reading it fails.
    const outside = new DatabaseSync(file)
    t.after(() => outside.close())
    const brokeAt = Date.now()
    outside.exec('ALTER TABLE jwt_revocations RENAME TO jwt_revocations_away')
    outside.exec(
      `INSERT INTO change_log (kind, subject, at) VALUES ('jwt_revocation', 'r-x', ${Date.now()})`,
    )
    assert.ok(
      await waitFor(() => auth.jwtRevocationsStaleSince() !== null, 3000),
      'the failed read is noticed',
    )
    const degraded = await app.inject({ url: '/readyz' })
    assert.equal(degraded.statusCode, 200, 'degraded, not unready: the rules read before hold')
    const body = degraded.json()
    assert.equal(body.status, 'degraded')
    assert.equal(body.checks.store, 'ok')
    assert.equal(body.checks.jwtRevocations, 'stale')
    const since = Date.parse(body.checks.jwtRevocationsStaleSince)
    assert.ok(since >= brokeAt - 1000 && since <= Date.now(), 'since when, as an ISO time')

    outside.exec('ALTER TABLE jwt_revocations_away RENAME TO jwt_revocations')
    // A whole read is retried every second.
    assert.ok(await waitFor(() => auth.jwtRevocationsStaleSince() === null, 3000))
    const back = await ready()
    assert.equal(back.status, 'ready')
    assert.equal(back.checks.jwtRevocations, 'ok')
    assert.equal(back.checks.jwtRevocationsStaleSince, undefined)
  })
})
