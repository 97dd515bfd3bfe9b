/**
 * JWT revocation rules on two instances on one Postgres (issue #34): a JWT cut by `jti`,
 * `sid` or `sub` through the CLI or through instance A's admin API is refused by both
 * instances within a second, cached there before (each instance answered 200 for it first),
 * while another token of the same subject (for `sub`: one issued after the rule's time)
 * still passes; the refusal's audit row names the rule. Times are printed as diagnostics.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it, type TestContext } from 'node:test'
import type { PostgresStore } from '../../src/stores/postgres.ts'
import { createTestIssuer, type TestIssuer } from '../helpers/jwt.ts'
import { skipReason } from '../helpers/services.ts'
import {
  bearer,
  cli,
  type Instance,
  issueOperatorToken,
  startTwoInstances,
  type TwoInstances,
  waitFor,
} from './cluster.ts'

/** The promise of issue #34: refused everywhere in under a second. */
const BOUND_MS = 1000
const ISSUER = 'https://idp.revoke.test'
type Kind = 'jti' | 'sid' | 'sub'

describe('JWT revocation rules on two instances on one Postgres: refused by both within 1 s', {
  skip: skipReason('postgres'),
}, () => {
  let two: TwoInstances
  let databaseUrl: string
  let admin: PostgresStore
  let a: Instance
  let b: Instance
  let idp: TestIssuer
  let operatorToken: string

  before(async () => {
    idp = createTestIssuer({ issuer: ISSUER })
    two = await startTwoInstances({
      // Lookups cached for 5 minutes: a refusal within a second came through the change log.
      overrides: { admin: { enabled: true, port: 0 }, auth: { lookupCacheTtlMs: 300_000 } },
      tenants: [{ id: 'acme', name: 'acme' }],
      prepare: async (store, url) => {
        await store.putIssuer(idp.config, Date.now())
        operatorToken = await issueOperatorToken(url)
      },
    })
    ;({ databaseUrl, admin, a, b } = two)
  })

  after(() => two?.close())

  const me = (instance: Instance, token: string) =>
    instance.request('/api/v1/me', bearer(token, 'acme'))

  /** Milliseconds from `since` until `instance` answers 401 for `token`, polling every 10 ms. */
  const until401 = (instance: Instance, token: string, since: number) =>
    waitFor(async () => (await me(instance, token)).status === 401, 'refused', {
      since,
      timeoutMs: 3000,
      intervalMs: 10,
    })

  /**
   * A token to cut and its sibling of the same subject that must keep passing, both answered
   * 200 by A and B first (cached there). For `sub`, the victim is issued a minute ago and
   * the sibling now: the rule refuses tokens issued before 30 s ago.
   */
  async function victimAndSibling(kind: Kind) {
    const sub = `user-${randomUUID()}`
    const now = Date.now()
    const victim = await idp.sign(
      { tenant_id: 'acme', sub, jti: randomUUID(), sid: randomUUID() },
      { nowMs: kind === 'sub' ? now - 60_000 : now },
    )
    const sibling = await idp.sign(
      { tenant_id: 'acme', sub, jti: randomUUID(), sid: randomUUID() },
      { nowMs: now },
    )
    for (const instance of [a, b]) {
      for (const token of [victim, sibling]) {
        const r = await me(instance, token)
        assert.equal(r.status, 200, JSON.stringify(r.json))
      }
    }
    const claims = JSON.parse(
      Buffer.from(victim.split('.')[1] as string, 'base64url').toString(),
    ) as Record<string, string>
    return { victim, sibling, value: claims[kind] as string, before: now - 30_000 }
  }

  /** Both instances refuse `victim` within the bound from `since`; the sibling passes. */
  async function refusedByBoth(
    t: TestContext,
    how: string,
    kind: Kind,
    since: number,
    victim: string,
    sibling: string,
  ) {
    const [onA, onB] = await Promise.all([until401(a, victim, since), until401(b, victim, since)])
    t.diagnostic(
      `${how} --${kind}: refused by A after ${onA.toFixed(1)} ms, by B after ${onB.toFixed(1)} ms`,
    )
    assert.ok(onA < BOUND_MS && onB < BOUND_MS, `A ${onA} ms, B ${onB} ms`)
    for (const instance of [a, b]) {
      const refused = await me(instance, victim)
      assert.equal(refused.status, 401)
      assert.equal(refused.json.code, 'invalid_token')
      assert.match(String(refused.headers.get('www-authenticate')), /error="invalid_token"/)
      const other = await me(instance, sibling)
      assert.equal(other.status, 200, `${how} --${kind}: the sibling token must still pass`)
    }
  }

  /** The auth.failed row of a refusal by `rule`, written by the instances' audit writers. */
  async function auditNames(rule: string) {
    await waitFor(
      async () =>
        (await admin.admin.searchAudit({ type: 'auth.failed' }, { limit: 200 })).items.some(
          (e) =>
            (e.details as { reason?: string; rule?: string }).rule === rule &&
            (e.details as { reason?: string }).reason === 'revoked_by_rule',
        ),
      `an auth.failed audit row naming ${rule}`,
      { timeoutMs: 5000 },
    )
    const made = await admin.admin.searchAudit({ type: 'jwt.revoked' }, { limit: 200 })
    assert.ok(made.items.some((e) => (e.details as { rule?: string }).rule === rule))
  }

  for (const kind of ['jti', 'sid', 'sub'] as const) {
    it(`a JWT revoked by ${kind} through the CLI (DATABASE_URL) is refused by both instances within 1 s`, async (t) => {
      const { victim, sibling, value, before } = await victimAndSibling(kind)
      const stored = () =>
        admin.listJwtRevocations(Date.now()).then((rules) => rules.find((r) => r.value === value))
      // Measured from the commit (polled every 5 ms), not from the CLI process's start.
      const committed = waitFor(async () => (await stored()) !== undefined, 'committed', {
        intervalMs: 5,
        timeoutMs: 15_000,
      }).then(() => performance.now())
      const args = ['jwt', 'revoke', '--issuer', ISSUER, `--${kind}`, value, '--reason', 'test']
      if (kind === 'sub') args.push('--before', new Date(before).toISOString())
      const run = cli(databaseUrl, ...args)
      const since = await committed
      await refusedByBoth(t, 'CLI jwt revoke', kind, since, victim, sibling)
      const out = await run
      assert.equal(out.code, 0, out.stderr)
      const rule = await stored()
      assert.ok(rule)
      assert.match(out.stdout, new RegExp(`rule ${rule.id}`))
      await auditNames(rule.id)
    })

    it(`a JWT revoked by ${kind} through A's admin API is refused by both instances within 1 s`, async (t) => {
      const { victim, sibling, value, before } = await victimAndSibling(kind)
      const response = await fetch(`${a.running.adminUrl}/admin/api/v1/jwt-revocations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${operatorToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          issuer: ISSUER,
          kind,
          value,
          reason: 'test',
          ...(kind === 'sub' ? { issuedBefore: new Date(before).toISOString() } : {}),
        }),
      })
      const since = performance.now()
      const body = (await response.json()) as { id: string; kind: string; expiresAt: string }
      assert.equal(response.status, 201, JSON.stringify(body))
      assert.equal(body.kind, kind)
      await refusedByBoth(t, 'admin API POST /jwt-revocations', kind, since, victim, sibling)
      await auditNames(body.id)
    })
  }

  it('a rule removed through the CLI lets its token pass again on both instances', async () => {
    const { victim, sibling, value } = await victimAndSibling('jti')
    const made = await cli(
      databaseUrl,
      'jwt',
      'revoke',
      '--issuer',
      ISSUER,
      '--jti',
      value,
      '--json',
    )
    assert.equal(made.code, 0, made.stderr)
    const { id } = JSON.parse(made.stdout) as { id: string }
    await Promise.all([
      until401(a, victim, performance.now()),
      until401(b, victim, performance.now()),
    ])
    const listed = await cli(databaseUrl, 'jwt', 'revocations', 'list', '--json')
    assert.ok(
      (JSON.parse(listed.stdout) as { revocations: { id: string }[] }).revocations.some(
        (r) => r.id === id,
      ),
    )
    const removed = await cli(databaseUrl, 'jwt', 'revocations', 'remove', id)
    assert.equal(removed.code, 0, removed.stderr)
    for (const instance of [a, b]) {
      await waitFor(async () => (await me(instance, victim)).status === 200, 'passes again', {
        timeoutMs: 3000,
      })
      assert.equal((await me(instance, sibling)).status, 200)
    }
  })
})
