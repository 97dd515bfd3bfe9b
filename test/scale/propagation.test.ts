import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { PostgresStore } from '../../src/stores/postgres.ts'
import { createTestIssuer } from '../helpers/jwt.ts'
import { skipReason } from '../helpers/services.ts'
import {
  bearer,
  cli,
  type Instance,
  insertPat,
  startTwoInstances,
  summarize,
  type TwoInstances,
  waitFor,
} from './cluster.ts'

/** The functional bound of issue #5: a change on one instance is enforced by all within 1 s. */
const PROPAGATION_BOUND_MS = 1000

/**
 * Two tokengate instances, A and B, on one Postgres. Both cache lookups for 5 minutes: any
 * change B enforces within a second therefore reached it through LISTEN/NOTIFY, not through
 * its cache expiring (with the default 2 s TTL a broken feed could still pass by luck).
 */
describe('two instances on one Postgres: changes reach the other instance within 1 s', {
  skip: skipReason('postgres'),
}, () => {
  let two: TwoInstances
  let databaseUrl: string
  let admin: PostgresStore
  let a: Instance
  let b: Instance
  let adminPat: string

  before(async () => {
    two = await startTwoInstances({
      overrides: { auth: { lookupCacheTtlMs: 300_000 } },
      tenants: ['acme', 'beta'].map((id) => ({ id, name: id })),
      prepare: async (store) => {
        adminPat = (await insertPat(store, 'acme', ['tokens:revoke'])).token
      },
    })
    ;({ databaseUrl, admin, a, b } = two)
  })

  after(() => two?.close())

  /** B answers 200 for `token` now, so that it holds a cached positive entry. */
  async function cachedOnB(token: string, tenantId?: string): Promise<void> {
    const r = await b.request('/api/v1/me', bearer(token, tenantId))
    assert.equal(r.status, 200, JSON.stringify(r.json))
  }

  /** Milliseconds from `since` until B answers `status` for `token`, polling every 20 ms. */
  function untilB(status: number, token: string, since: number, tenantId?: string) {
    return waitFor(
      async () => (await b.request('/api/v1/me', bearer(token, tenantId))).status === status,
      `B answers ${status}`,
      { since, timeoutMs: 3000, intervalMs: 20 },
    )
  }

  /**
   * When a CLI's change is first visible in Postgres (polled every 5 ms, while the CLI runs):
   * propagation is measured from there, so the CLI process's own start-up is not counted.
   */
  function committedAt(probe: () => Promise<boolean>): Promise<number> {
    return waitFor(probe, 'the CLI change is committed', { intervalMs: 5, timeoutMs: 15_000 }).then(
      () => performance.now(),
    )
  }

  it('a PAT revoked through instance A’s API is rejected by instance B within 1 s', async (t) => {
    const victim = await insertPat(admin, 'acme')
    await cachedOnB(victim.token)
    const since = performance.now()
    const revoked = await a.request(`/api/v1/tokens/${victim.id}`, bearer(adminPat), 'DELETE')
    assert.equal(revoked.status, 200, JSON.stringify(revoked.json))
    const elapsed = await untilB(401, victim.token, since)
    t.diagnostic(`API revoke on A → 401 on B after ${elapsed.toFixed(1)} ms`)
    assert.ok(elapsed < PROPAGATION_BOUND_MS, `${elapsed} ms`)
    const r = await b.request('/api/v1/me', bearer(victim.token))
    assert.equal(r.json.code, 'invalid_token')
  })

  it('a PAT revoked through the CLI (DATABASE_URL) is rejected by both instances within 1 s', async (t) => {
    const victim = await insertPat(admin, 'acme')
    await cachedOnB(victim.token)
    assert.equal((await a.request('/api/v1/me', bearer(victim.token))).status, 200)
    const committed = committedAt(async () => (await admin.getPat(victim.id))?.revokedAt != null)
    const run = cli(databaseUrl, 'pat', 'revoke', victim.id)
    const elapsed = await untilB(401, victim.token, await committed)
    const out = await run
    assert.equal(out.code, 0, out.stderr)
    t.diagnostic(`CLI revoke committed → 401 on B after ${elapsed.toFixed(1)} ms`)
    assert.ok(elapsed < PROPAGATION_BOUND_MS, `${elapsed} ms`)
    assert.equal((await a.request('/api/v1/me', bearer(victim.token))).status, 401)
  })

  it('a tenant disabled through the CLI is rejected by B within 1 s, for PATs and JWTs alike', async (t) => {
    const idp = createTestIssuer({ issuer: 'https://idp.tenant.test' })
    await admin.putIssuer(idp.config, Date.now())
    const pat = await insertPat(admin, 'beta')
    const jwt = await idp.sign({ tenant_id: 'beta' })
    await waitFor(
      async () => (await b.request('/api/v1/me', bearer(jwt, 'beta'))).status === 200,
      'B trusts the issuer',
    )
    await cachedOnB(pat.token)
    const committed = committedAt(async () => (await admin.findTenant('beta'))?.enabled === false)
    const run = cli(databaseUrl, 'tenant', 'disable', 'beta')
    const elapsed = await untilB(401, pat.token, await committed)
    const out = await run
    assert.equal(out.code, 0, out.stderr)
    t.diagnostic(`CLI tenant disable committed → 401 on B after ${elapsed.toFixed(1)} ms`)
    assert.ok(elapsed < PROPAGATION_BOUND_MS, `${elapsed} ms`)
    assert.equal((await b.request('/api/v1/me', bearer(jwt, 'beta'))).status, 401)

    const enabled = await cli(databaseUrl, 'tenant', 'enable', 'beta')
    assert.equal(enabled.code, 0, enabled.stderr)
    await untilB(200, pat.token, performance.now())
  })

  it('an issuer added while both run is trusted by B within 1 s', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-scale-idp-'))
    t.after(() => rmSync(dir, { recursive: true, force: true }))
    const idp = createTestIssuer({ issuer: 'https://idp.new.test' })
    const jwksFile = join(dir, 'jwks.json')
    writeFileSync(jwksFile, JSON.stringify({ keys: [idp.publicJwk] }))
    const jwt = await idp.sign({ tenant_id: 'acme' })
    assert.equal((await b.request('/api/v1/me', bearer(jwt, 'acme'))).status, 401)
    const committed = committedAt(async () =>
      (await admin.listIssuers()).some((issuer) => issuer.issuer === 'https://idp.new.test'),
    )
    const run = cli(
      databaseUrl,
      'issuer',
      'add',
      '--issuer',
      'https://idp.new.test',
      '--audience',
      'tokengate',
      '--jwks-file',
      jwksFile,
    )
    const since = await committed
    const elapsed = await untilB(200, jwt, since, 'acme')
    const out = await run
    assert.equal(out.code, 0, out.stderr)
    t.diagnostic(`CLI issuer add committed → JWT accepted by B after ${elapsed.toFixed(1)} ms`)
    assert.ok(elapsed < PROPAGATION_BOUND_MS, `${elapsed} ms`)
    // A hears the same notification on its own connection: within the same bound, not
    // necessarily before B (asserting it at once failed about once in a loaded run).
    const byA = await waitFor(
      async () => (await a.request('/api/v1/me', bearer(jwt, 'acme'))).status === 200,
      'A answers 200',
      { since, timeoutMs: 3000, intervalMs: 20 },
    )
    assert.ok(byA < PROPAGATION_BOUND_MS, `A: ${byA} ms`)
  })

  it('a revocation pruned from the change log before B read it is still refused by B within 1 s', async (t) => {
    const victim = await insertPat(admin, 'acme')
    await cachedOnB(victim.token)
    const since = performance.now()
    // Revoked, one more change, and the log pruned past both (retention passed), in one commit:
    // B never reads the revocation's entry, only that entries after its cursor were pruned.
    await admin.transaction(async (tx) => {
      await tx.revokePat(victim.id, Date.now())
      await tx.createTenant({ id: `later-${victim.id}`, name: 'later' }, Date.now())
      const prunable = tx as unknown as { pruneChangeLog(before: number): Promise<number> }
      await prunable.pruneChangeLog(Date.now() + 86_400_000)
    })
    const elapsed = await untilB(401, victim.token, since)
    t.diagnostic(`revoke pruned before B read it → 401 on B after ${elapsed.toFixed(1)} ms`)
    assert.ok(elapsed < PROPAGATION_BOUND_MS, `${elapsed} ms`)
  })

  it('end-to-end revocation propagation over 100 revocations (API on A → 401 on B)', async (t) => {
    const rounds = 100
    const victims = []
    for (let i = 0; i < rounds; i++) victims.push(await insertPat(admin, 'acme'))
    const times: number[] = []
    for (const victim of victims) {
      await cachedOnB(victim.token)
      const since = performance.now()
      const revoked = await a.request(`/api/v1/tokens/${victim.id}`, bearer(adminPat), 'DELETE')
      assert.equal(revoked.status, 200)
      // Polled back to back (1 ms apart) for a fine-grained measurement.
      times.push(
        await waitFor(
          async () => (await b.request('/api/v1/me', bearer(victim.token))).status === 401,
          'B rejects the revoked PAT',
          { since, timeoutMs: 3000, intervalMs: 1 },
        ),
      )
    }
    const { median, max } = summarize(times)
    t.diagnostic(
      `revocation propagation over ${rounds} (DELETE sent on A → first 401 on B): median ${median.toFixed(1)} ms, max ${max.toFixed(1)} ms`,
    )
    assert.ok(max < PROPAGATION_BOUND_MS, `max ${max} ms`)
  })
})
