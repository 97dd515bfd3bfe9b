/**
 * The quota rules across instances and operator changes (issue #31), each against two (or
 * three) real tokengate instances on one Postgres, as the issue reproduced them:
 * - a reset starts a new quota generation: uses an instance reserved before the reset and
 *   gives back at shutdown never lower the new count (before: 403 served on a quota of 400);
 * - a rotation family shares one quota and one enabled state: lowering the new key's quota
 *   binds its predecessor in grace, and disabling one disables both (before: 50 served on a
 *   quota lowered to 20, and the old token kept working).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import type { PostgresStore } from '../../src/stores/postgres.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { bearer, cli, type Instance, openAdminStore, startInstance, waitFor } from './cluster.ts'

describe('quota rules on several instances (Postgres)', { skip: skipReason('postgres') }, () => {
  let pg: PostgresServer
  let databaseUrl: string
  let admin: PostgresStore
  const running: Instance[] = []

  const start = async () => {
    const instance = await startInstance(databaseUrl, { auth: { lookupCacheTtlMs: 300_000 } })
    running.push(instance)
    return instance
  }

  before(async () => {
    pg = await startPostgres()
    databaseUrl = await pg.createDatabase()
    admin = await openAdminStore(databaseUrl)
    await admin.createTenant({ id: 'acme', name: 'acme' }, Date.now())
  })

  after(async () => {
    for (const instance of running) await instance.close()
    await admin?.close()
    await pg?.stop()
  })

  async function ok(...args: string[]): Promise<string> {
    const out = await cli(databaseUrl, ...args)
    assert.equal(out.code, 0, out.stderr)
    return out.stdout
  }

  async function issue(...flags: string[]): Promise<{ token: string; id: string }> {
    const out = await ok('pat', 'issue', '--tenant', 'acme', '--subject', 'q', '--json', ...flags)
    return JSON.parse(out) as { token: string; id: string }
  }

  const me = (instance: Instance, token: string) => instance.request('/api/v1/me', bearer(token))

  /** Sends `count` requests, `batch` at a time; returns how many were served (200). */
  async function served(
    count: number,
    pick: (i: number) => [Instance, string],
    batch = 25,
  ): Promise<number> {
    let n = 0
    for (let i = 0; i < count; i += batch) {
      const answers = await Promise.all(
        Array.from({ length: Math.min(batch, count - i) }, (_, j) => me(...pick(i + j))),
      )
      for (const answer of answers) {
        if (answer.status === 200) n++
        else assert.equal(answer.json.code, 'quota_exhausted', JSON.stringify(answer.json))
      }
    }
    return n
  }

  it('after a reset, a block reserved before it and given back at shutdown does not lower the new count', async () => {
    const [a, b] = [await start(), await start()]
    const { token, id } = await issue('--quota', '400')
    // A reserves a block (4 uses of 400) and spends one of it.
    assert.equal((await me(a, token)).status, 200)
    await ok('pat', 'edit', id, '--reset-quota')
    // B, which held nothing before the reset, spends the whole new quota.
    assert.equal(await served(450, () => [b, token]), 400)
    // A stops gracefully and gives back its 3 unspent uses of the old generation.
    await a.close()
    running.splice(running.indexOf(a), 1)
    assert.equal((await admin.readQuota([id])).get(id)?.used, 400)
    const c = await start()
    assert.equal(await served(10, () => [c, token]), 0, 'a quota of 400 serves 400 after a reset')
  })

  it("lowering a rotated key's quota binds its predecessor in grace (one quota per family)", async () => {
    const [a, b] = [await start(), await start()]
    const old = await issue('--quota', '50')
    const rotated = JSON.parse(await ok('pat', 'rotate', old.id, '--grace', '1h', '--json')) as {
      token: string
      id: string
    }
    await ok('pat', 'edit', rotated.id, '--quota', '20')
    const shown = JSON.parse(await ok('pat', 'show', old.id, '--json')) as {
      quota: { limit: number }
    }
    assert.equal(shown.quota.limit, 20, 'the predecessor carries the family quota')
    // Both tokens, on both instances: 20 in all.
    const tokens = [old.token, rotated.token]
    assert.equal(await served(80, (i) => [i % 2 === 0 ? a : b, tokens[(i >> 1) % 2] as string]), 20)
    // Editing the predecessor edits the family too.
    await ok('pat', 'edit', old.id, '--quota', '25')
    const current = JSON.parse(await ok('pat', 'show', rotated.id, '--json')) as {
      quota: { limit: number }
    }
    assert.equal(current.quota.limit, 25)
  })

  it('disabling a rotated key disables its predecessor in grace, on every instance', async () => {
    const [a, b] = [await start(), await start()]
    const old = await issue()
    const rotated = JSON.parse(await ok('pat', 'rotate', old.id, '--grace', '1h', '--json')) as {
      token: string
      id: string
    }
    for (const instance of [a, b]) assert.equal((await me(instance, old.token)).status, 200)
    await ok('pat', 'disable', rotated.id)
    for (const instance of [a, b]) {
      await waitFor(async () => (await me(instance, old.token)).status === 401, 'old refused', {
        timeoutMs: 3000,
      })
    }
    await ok('pat', 'enable', old.id)
    for (const instance of [a, b]) {
      await waitFor(async () => (await me(instance, rotated.token)).status === 200, 'new served', {
        timeoutMs: 3000,
      })
    }
  })
})
