/**
 * JWT revocation rules (issue #34) in one process: what each kind of rule refuses, that a
 * cached token is refused once a rule names it, that rules expire by themselves when every
 * token they could match has, and how the change feed keeps a process's set current.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createJwtRevocationFeed } from '../../src/auth/jwt-revocation-feed.ts'
import { createJwtVerifier } from '../../src/core/jwt.ts'
import {
  type JwtRevocationRule,
  JwtRevocationSet,
  jwtRevocationExpiry,
} from '../../src/core/jwt-revocations.ts'
import type { JwtOutcome, VerifiedJwt } from '../../src/core/ports.ts'
import {
  createManualClock,
  createTestIssuer,
  TEST_EPOCH_MS,
  TEST_ISSUER,
  TEST_SUBJECT,
  TEST_TENANT,
} from '../helpers/jwt.ts'

const NOW = TEST_EPOCH_MS
const at = (ms: number) => ({ now: () => ms })
const MAX_LIFETIME_SEC = 3600
const TOLERANCE_SEC = 30

function rule(id: string, overrides: Partial<JwtRevocationRule>): JwtRevocationRule {
  return {
    id,
    issuer: TEST_ISSUER,
    kind: 'sub',
    value: TEST_SUBJECT,
    issuedBefore: null,
    reason: null,
    createdAt: NOW,
    createdBy: null,
    expiresAt: jwtRevocationExpiry(
      NOW,
      overrides.issuedBefore ?? null,
      MAX_LIFETIME_SEC,
      TOLERANCE_SEC,
    ),
    ...overrides,
  }
}

function jwt(overrides: Partial<VerifiedJwt> = {}): VerifiedJwt {
  return {
    issuer: TEST_ISSUER,
    subject: TEST_SUBJECT,
    tenantId: TEST_TENANT,
    permissions: [],
    tokenId: 'jti-1',
    expiresAt: NOW + 300_000,
    keyId: undefined,
    issuedAt: NOW - 1000,
    sessionId: 'sid-1',
    ...overrides,
  }
}

function refusal(outcome: JwtOutcome) {
  assert.equal(outcome.ok, false, 'expected the token to be refused')
  return (outcome as { failure: { code: string; reason?: string; ruleId?: string } }).failure
}

describe('the rule set', () => {
  test('each kind matches its claim, of its issuer only', () => {
    const set = new JwtRevocationSet()
    assert.equal(set.match(jwt(), at(NOW)), undefined)
    set.put(rule('j', { kind: 'jti', value: 'jti-1' }))
    assert.equal(set.match(jwt(), at(NOW))?.id, 'j')
    assert.equal(set.match(jwt({ tokenId: 'jti-2', sessionId: undefined }), at(NOW)), undefined)
    assert.equal(set.match(jwt({ issuer: 'https://other.test' }), at(NOW)), undefined)
    set.put(rule('s', { kind: 'sid', value: 'sid-2' }))
    assert.equal(set.match(jwt({ tokenId: undefined, sessionId: 'sid-2' }), at(NOW))?.id, 's')
    assert.equal(set.match(jwt({ tokenId: undefined, sessionId: 'sid-3' }), at(NOW)), undefined)
    set.remove('j')
    set.remove('s')
    assert.equal(set.size, 0)
    assert.equal(set.match(jwt(), at(NOW)), undefined)
  })

  test('sub and tenant rules refuse tokens issued before their time, and tokens without iat', () => {
    const set = new JwtRevocationSet()
    set.put(rule('u', { kind: 'sub', value: TEST_SUBJECT, issuedBefore: NOW }))
    assert.equal(set.match(jwt({ issuedAt: NOW - 1000 }), at(NOW))?.id, 'u')
    assert.equal(set.match(jwt({ issuedAt: NOW }), at(NOW)), undefined)
    assert.equal(set.match(jwt({ issuedAt: NOW + 1000 }), at(NOW + 1000)), undefined)
    // Its age unknown: fail closed while the rule lives.
    assert.equal(set.match(jwt({ issuedAt: undefined }), at(NOW))?.id, 'u')
    assert.equal(set.match(jwt({ subject: 'someone-else' }), at(NOW)), undefined)
    set.put(rule('t', { kind: 'tenant', value: TEST_TENANT, issuedBefore: NOW }))
    assert.equal(set.match(jwt({ subject: 'someone-else' }), at(NOW))?.id, 't')
    assert.equal(set.match(jwt({ subject: 'x', tenantId: 'other-tenant' }), at(NOW)), undefined)
  })

  test('a rule expires when every token it could match has expired', () => {
    const created = NOW
    const expiresAt = jwtRevocationExpiry(created, created, MAX_LIFETIME_SEC, TOLERANCE_SEC)
    assert.equal(expiresAt, created + (MAX_LIFETIME_SEC + TOLERANCE_SEC) * 1000)
    // An earlier time bound expires earlier; a later one never beyond the creation's.
    assert.equal(
      jwtRevocationExpiry(created, created - 600_000, MAX_LIFETIME_SEC, TOLERANCE_SEC),
      expiresAt - 600_000,
    )
    const set = new JwtRevocationSet()
    set.put(rule('u', { issuedBefore: created, expiresAt }))
    // The longest-lived token it matches (issued just before, max lifetime) is expired by then.
    const longest = jwt({
      issuedAt: created - 1000,
      expiresAt: created - 1000 + MAX_LIFETIME_SEC * 1000,
    })
    assert.equal(set.match(longest, at(expiresAt - 1))?.id, 'u')
    assert.ok(longest.expiresAt + TOLERANCE_SEC * 1000 < expiresAt)
    assert.equal(set.match(longest, at(expiresAt)), undefined)
  })
})

describe('the verifier with rules', () => {
  test('a cached token is refused as invalid_token revoked_by_rule once a rule names it', async () => {
    const clock = createManualClock()
    const issuer = createTestIssuer({ clock })
    const rules = new JwtRevocationSet()
    const verifier = createJwtVerifier([issuer.config], {
      clock,
      revocations: rules,
      maxLifetimeSec: MAX_LIFETIME_SEC,
    })
    const token = await issuer.sign({ jti: 'token-1', sid: 'session-1' })
    const other = await issuer.sign({ jti: 'token-2', sid: 'session-2' })
    assert.equal((await verifier.verify(token)).ok, true)
    // Cached now: answered without a promise.
    const cached = verifier.verifyMaybeSync(token)
    assert.ok(!(cached instanceof Promise) && cached.ok)
    for (const [id, kind, value] of [
      ['r-jti', 'jti', 'token-1'],
      ['r-sid', 'sid', 'session-1'],
      ['r-sub', 'sub', TEST_SUBJECT],
    ] as const) {
      rules.put(rule(id, { kind, value, issuedBefore: kind === 'sub' ? clock.now() + 1000 : null }))
      const refused = verifier.verifyMaybeSync(token)
      assert.ok(!(refused instanceof Promise))
      assert.deepEqual(refusal(refused), {
        code: 'invalid_token',
        reason: 'revoked_by_rule',
        detail: 'The access token is not valid.',
        ruleId: id,
      })
      // The other token of the same subject passes unless the rule is by subject.
      assert.equal((await verifier.verify(other)).ok, kind !== 'sub')
      rules.remove(id)
      assert.equal((await verifier.verify(token)).ok, true)
    }
    // A token of the same subject issued after the rule's time passes.
    rules.put(rule('r-sub', { kind: 'sub', value: TEST_SUBJECT, issuedBefore: clock.now() + 1000 }))
    clock.advance(2000)
    const later = await issuer.sign({ jti: 'token-3' })
    assert.equal((await verifier.verify(later)).ok, true)
    assert.equal(refusal(await verifier.verify(token)).reason, 'revoked_by_rule')
    // A forged token naming a revoked jti is still a bad signature, not a rule match.
    const [h, p] = token.split('.')
    assert.equal(refusal(await verifier.verify(`${h}.${p}.AAAA`)).reason, 'bad_signature')
  })
})

describe('the feed', () => {
  function fakeStore(initial: JwtRevocationRule[]) {
    const rows = new Map(initial.map((r) => [r.id, r]))
    let down = false
    return {
      rows,
      setDown(value: boolean) {
        down = value
      },
      async getJwtRevocation(id: string) {
        if (down) throw new Error('store down')
        return rows.get(id)
      },
      async snapshotJwtRevocations(now: number) {
        if (down) throw new Error('store down')
        return { rules: [...rows.values()].filter((r) => r.expiresAt > now), head: 0 }
      },
    }
  }

  test('reads every rule, then follows changes by id; keeps its rules while the store is down', async () => {
    const clock = createManualClock()
    const store = fakeStore([rule('a', { kind: 'jti', value: 'x' })])
    const errors: unknown[] = []
    const feed = createJwtRevocationFeed(store, clock, (e) => errors.push(e))
    await feed.reload()
    assert.deepEqual(
      feed.rules.rules().map((r) => r.id),
      ['a'],
    )
    store.rows.set('b', rule('b', { kind: 'sid', value: 'y' }))
    feed.changed('b')
    store.rows.delete('a')
    feed.changed('a')
    await feed.reload()
    assert.deepEqual(
      feed.rules.rules().map((r) => r.id),
      ['b'],
    )
    store.setDown(true)
    await feed.reload()
    assert.equal(feed.failing(), true)
    assert.equal(feed.failingSince(), clock.now(), 'stale since the first failed read')
    assert.equal(errors.length, 1)
    assert.deepEqual(
      feed.rules.rules().map((r) => r.id),
      ['b'],
    )
    store.setDown(false)
    // An expired rule read by id is dropped.
    clock.advance((MAX_LIFETIME_SEC + TOLERANCE_SEC) * 1000)
    feed.changed('b')
    await feed.reload()
    assert.equal(feed.failing(), false)
    assert.equal(feed.failingSince(), null)
    assert.equal(feed.rules.size, 0)
    feed.close()
  })
})
