import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { AuthFailure } from '../../src/core/failure.ts'
import type { AuthResult } from '../../src/core/principal.ts'
import { addPat, bearer, HOUR_MS, harness, NOW } from '../helpers/core-fakes.ts'

function failureOf(result: AuthResult): AuthFailure {
  assert.equal(result.ok, false, 'expected a failure')
  if (result.ok) throw new Error('unreachable')
  return result.failure
}

const auth = (token: string) => ({ authorization: bearer(token), tenantIds: [] })

describe('authenticate: rotated PATs', () => {
  test('a rotated-out PAT within its grace authenticates as itself', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups, {
      patch: { supersededAt: NOW - 1000, graceUntil: NOW + HOUR_MS },
    })
    const result = await h.authenticate(auth(token))
    assert.equal(result.ok, true)
    if (result.ok) assert.equal(result.principal.tokenId, record.id)
  })

  test('at the end of the grace it is refused as rotated, carrying its id, with the generic detail', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups, {
      patch: { supersededAt: NOW - HOUR_MS, graceUntil: NOW },
    })
    const failure = failureOf(await h.authenticate(auth(token)))
    assert.deepEqual(failure, {
      code: 'invalid_token',
      reason: 'rotated',
      detail: 'The access token is not valid.',
      tokenId: record.id,
      key: { tokenId: record.id, tenantId: 'acme' },
    })
    h.clock.set(NOW - 1)
    assert.equal((await h.authenticate(auth(token))).ok, true, 'one ms before: still in grace')
  })

  test('grace 0 (graceUntil = supersededAt) is refused at once', async () => {
    const h = harness()
    const { token } = addPat(h.lookups, { patch: { supersededAt: NOW, graceUntil: NOW } })
    const failure = failureOf(await h.authenticate(auth(token)))
    assert.equal(failure.code === 'invalid_token' && failure.reason, 'rotated')
  })

  test('a superseded record without a grace end is refused (fail closed)', async () => {
    const h = harness()
    const { token } = addPat(h.lookups, { patch: { supersededAt: NOW - 1, graceUntil: null } })
    const failure = failureOf(await h.authenticate(auth(token)))
    assert.equal(failure.code === 'invalid_token' && failure.reason, 'rotated')
  })

  test('revoked wins over rotated: no second family revocation for a token already revoked', async () => {
    const h = harness()
    const { token } = addPat(h.lookups, {
      patch: { supersededAt: NOW - HOUR_MS, graceUntil: NOW - HOUR_MS, revokedAt: NOW - 10 },
    })
    const failure = failureOf(await h.authenticate(auth(token)))
    assert.equal(failure.code === 'invalid_token' && failure.reason, 'revoked')
    assert.equal('tokenId' in failure, false)
  })

  test('rotated is decided before expiry: a replaced token is a reuse signal even when expired', async () => {
    const h = harness()
    const { token } = addPat(h.lookups, {
      expiresAt: NOW - 1,
      patch: { supersededAt: NOW - HOUR_MS, graceUntil: NOW - HOUR_MS },
    })
    const failure = failureOf(await h.authenticate(auth(token)))
    assert.equal(failure.code === 'invalid_token' && failure.reason, 'rotated')
  })

  test('an expired token still in its grace is expired (the grace never extends a lifetime)', async () => {
    const h = harness()
    const { token } = addPat(h.lookups, {
      expiresAt: NOW - 1,
      patch: { supersededAt: NOW - 10, graceUntil: NOW + HOUR_MS },
    })
    assert.equal(failureOf(await h.authenticate(auth(token))).code, 'token_expired')
  })

  test('records without rotation fields (older stores, fakes) behave as never rotated', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups)
    const { supersededAt: _s, graceUntil: _g, ...bare } = record
    h.lookups.pats.set(record.tokenHash, bare)
    assert.equal((await h.authenticate(auth(token))).ok, true)
  })
})
