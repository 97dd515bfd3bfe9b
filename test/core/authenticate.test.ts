import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { sameTenantId } from '../../src/core/authenticate.ts'
import type { AuthFailure } from '../../src/core/failure.ts'
import { hashPat } from '../../src/core/pat.ts'
import type { AuthResult } from '../../src/core/principal.ts'
import {
  acceptJwt,
  addPat,
  addTenant,
  bearer,
  HOUR_MS,
  harness,
  NOW,
  rejectJwt,
} from '../helpers/core-fakes.ts'

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

function failureOf(result: AuthResult): AuthFailure {
  assert.equal(result.ok, false, 'expected a failure')
  if (result.ok) throw new Error('unreachable')
  return result.failure
}

describe('authenticate: header parsing', () => {
  test('no Authorization → missing_authorization, nothing else consulted', async () => {
    const h = harness()
    const result = await h.authenticate({ authorization: [], tenantIds: ['acme'] })
    assert.deepEqual(failureOf(result), { code: 'missing_authorization' })
    assert.deepEqual(h.lookups.calls, { findPatByHash: 0, findTenant: 0 })
    assert.equal(h.jwt.verified.length, 0)
  })

  test('malformed Authorization → malformed_authorization, nothing else consulted', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    const result = await h.authenticate({ authorization: [`bearer ${token}`], tenantIds: [] })
    assert.equal(failureOf(result).code, 'malformed_authorization')
    assert.deepEqual(h.lookups.calls, { findPatByHash: 0, findTenant: 0 })
    assert.equal(h.jwt.verified.length, 0)
  })
})

describe('authenticate: PAT', () => {
  test('a tokenSha256 hint is used for exactly its token, ignored for any other', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    const hashes: string[] = []
    const find = h.lookups.findPatByHash
    h.lookups.findPatByHash = (hash) => {
      hashes.push(hash)
      return find(hash)
    }
    const used = await h.authenticate({
      authorization: bearer(token),
      tenantIds: [],
      tokenSha256: { token, sha256Hex: hashPat(token) },
    })
    assert.equal(used.ok, true)
    // A hint for another token (a duplicated header Node folded) must not steer the lookup.
    const other = await h.authenticate({
      authorization: bearer(token),
      tenantIds: [],
      tokenSha256: {
        token: `${token.slice(0, -1)}${token.endsWith('x') ? 'y' : 'x'}`,
        sha256Hex: 'f'.repeat(64),
      },
    })
    assert.equal(other.ok, true)
    assert.deepEqual(hashes, [hashPat(token), hashPat(token)])
  })

  test('a valid PAT → its principal; looked up once by SHA-256; JWT verifier untouched', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups, { permissions: ['tokens:read', 'audit:read'] })
    const hashes: string[] = []
    const find = h.lookups.findPatByHash
    h.lookups.findPatByHash = (hash) => {
      hashes.push(hash)
      return find(hash)
    }
    const result = await h.authenticate({ authorization: bearer(token), tenantIds: [] })
    assert.deepEqual(result, {
      ok: true,
      principal: {
        tokenType: 'pat',
        tenantId: 'acme',
        subject: 'ci-bot',
        permissions: ['tokens:read', 'audit:read'],
        tokenId: record.id,
        expiresAt: NOW + 24 * HOUR_MS,
        fingerprint: `pat_…${token.slice(-4)}`,
      },
    })
    assert.deepEqual(hashes, [hashPat(token)])
    assert.equal(h.lookups.calls.findTenant, 1)
    assert.equal(h.jwt.verified.length, 0)
    assert.ok(result.ok && Object.isFrozen(result.principal))
  })

  test('a PAT that never expires is accepted', async () => {
    const h = harness()
    const { token } = addPat(h.lookups, { expiresAt: null })
    const result = await h.authenticate({ authorization: bearer(token), tenantIds: [] })
    assert.ok(result.ok)
    assert.equal(result.principal.expiresAt, null)
  })

  test('X-Tenant-Id equal to the PAT tenant is accepted', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    assert.ok((await h.authenticate({ authorization: bearer(token), tenantIds: ['acme'] })).ok)
  })

  test('X-Tenant-Id naming another tenant → tenant_mismatch', async () => {
    const h = harness()
    addTenant(h.lookups, 'other')
    const { token } = addPat(h.lookups)
    for (const tenantIds of [['other'], ['ACME'], ['acme '], [' acme'], [''], ['acme, acme']]) {
      const result = await h.authenticate({ authorization: bearer(token), tenantIds })
      assert.equal(failureOf(result).code, 'tenant_mismatch', JSON.stringify(tenantIds))
    }
  })

  test('two X-Tenant-Id headers with a PAT → tenant_mismatch, even if both are right', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    const result = await h.authenticate({
      authorization: bearer(token),
      tenantIds: ['acme', 'acme'],
    })
    assert.equal(failureOf(result).code, 'tenant_mismatch')
  })

  test('every single-character change to a valid PAT is refused without a store lookup', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    let mutations = 0
    for (let i = 0; i < token.length; i++) {
      for (const char of `${BASE62}-._~+/=`) {
        if (char === token[i]) continue
        const mutated = token.slice(0, i) + char + token.slice(i + 1)
        const result = await h.authenticate({ authorization: bearer(mutated), tenantIds: ['acme'] })
        assert.equal(result.ok, false, `position ${i} → ${char} was accepted`)
        if (i >= 4 && BASE62.includes(char)) {
          const failure = failureOf(result)
          assert.equal(failure.code, 'invalid_token')
          assert.equal(failure.code === 'invalid_token' && failure.reason, 'bad_checksum')
        }
        mutations++
      }
    }
    assert.ok(mutations > 42 * 60)
    assert.equal(h.lookups.calls.findPatByHash, 0, 'the store was consulted')
  })

  test('wrong length or alphabet → invalid_token/malformed without a store lookup', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    for (const bad of [token.slice(0, -1), `${token}A`, 'pat_', `pat_${'~'.repeat(38)}`]) {
      const failure = failureOf(await h.authenticate({ authorization: bearer(bad), tenantIds: [] }))
      assert.deepEqual(
        failure.code === 'invalid_token' && failure.reason,
        'malformed',
        bad.length.toString(),
      )
    }
    assert.equal(h.lookups.calls.findPatByHash, 0)
  })

  test('PAT_ in uppercase takes the JWT path (and fails there), never the store', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    const upper = `PAT_${token.slice(4)}`
    const result = await h.authenticate({ authorization: bearer(upper), tenantIds: ['acme'] })
    assert.equal(failureOf(result).code, 'invalid_token')
    assert.deepEqual(h.jwt.verified, [upper])
    assert.equal(h.lookups.calls.findPatByHash, 0)
  })

  test('an unknown PAT → invalid_token/unknown_token', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups)
    h.lookups.pats.delete(record.tokenHash)
    const failure = failureOf(await h.authenticate({ authorization: bearer(token), tenantIds: [] }))
    assert.deepEqual(failure, {
      code: 'invalid_token',
      reason: 'unknown_token',
      detail: 'The access token is not valid.',
    })
  })

  test('a store row whose hash differs from the token hash is treated as unknown', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups)
    h.lookups.pats.set(record.tokenHash, { ...record, tokenHash: hashPat('something else') })
    const failure = failureOf(await h.authenticate({ authorization: bearer(token), tenantIds: [] }))
    assert.equal(failure.code === 'invalid_token' && failure.reason, 'unknown_token')
  })

  test('a revoked PAT → invalid_token/revoked, with the same public detail as unknown', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups, { patch: { revokedAt: NOW - 1 } })
    const failure = failureOf(await h.authenticate({ authorization: bearer(token), tenantIds: [] }))
    assert.deepEqual(failure, {
      code: 'invalid_token',
      reason: 'revoked',
      detail: 'The access token is not valid.',
      key: { tokenId: record.id, tenantId: 'acme' },
    })
    assert.equal(h.lookups.calls.findTenant, 0)
  })

  test('a disabled PAT → invalid_token/disabled (401, never 403), the public detail of unknown', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups, { patch: { disabledAt: NOW - 1 } })
    const failure = failureOf(await h.authenticate({ authorization: bearer(token), tenantIds: [] }))
    // The stored key is named for usage counting only (failure-response.ts never shows it).
    assert.deepEqual(failure, {
      code: 'invalid_token',
      reason: 'disabled',
      detail: 'The access token is not valid.',
      key: { tokenId: record.id, tenantId: 'acme' },
    })
    assert.equal(h.lookups.calls.findTenant, 0)
    // Expired wins over disabled: the caller is told what is final.
    const both = addPat(h.lookups, { expiresAt: NOW, patch: { disabledAt: NOW - 1 } })
    const expired = failureOf(
      await h.authenticate({ authorization: bearer(both.token), tenantIds: [] }),
    )
    assert.equal(expired.code, 'token_expired')
  })

  test('a PAT with its own rate limit or quota carries them on its principal; others carry none', async () => {
    const h = harness()
    const rateLimit = { max: 5, windowSec: 60 }
    const quota = { limit: 3, refill: 'daily' as const, counter: 'tok_x' }
    const limited = addPat(h.lookups, { patch: { rateLimit, quota } })
    const result = await h.authenticate({ authorization: bearer(limited.token), tenantIds: [] })
    assert.ok(result.ok)
    assert.deepEqual(result.principal.limits, { rateLimit, quota })
    const plain = addPat(h.lookups, { patch: { rateLimit: null, quota: null, metadata: { a: 1 } } })
    const other = await h.authenticate({ authorization: bearer(plain.token), tenantIds: [] })
    assert.ok(other.ok)
    assert.ok(!('limits' in other.principal))
  })

  test('a PAT expiring exactly now is expired; one millisecond later it is still valid', async () => {
    const h = harness()
    const expired = addPat(h.lookups, { expiresAt: NOW })
    const valid = addPat(h.lookups, { expiresAt: NOW + 1 })
    const failure = failureOf(
      await h.authenticate({ authorization: bearer(expired.token), tenantIds: [] }),
    )
    assert.deepEqual(failure, {
      code: 'token_expired',
      detail: 'The access token has expired.',
      key: { tokenId: expired.record.id, tenantId: 'acme' },
    })
    assert.ok((await h.authenticate({ authorization: bearer(valid.token), tenantIds: [] })).ok)
    h.clock.set(NOW + 1)
    const later = await h.authenticate({ authorization: bearer(valid.token), tenantIds: [] })
    assert.equal(failureOf(later).code, 'token_expired')
  })

  test('a PAT whose tenant is disabled or gone → invalid_token', async () => {
    const h = harness()
    addTenant(h.lookups, 'sleepy', false)
    const disabled = addPat(h.lookups, { tenantId: 'sleepy' })
    const orphan = addPat(h.lookups, { tenantId: 'gone' })
    const a = failureOf(
      await h.authenticate({ authorization: bearer(disabled.token), tenantIds: [] }),
    )
    const b = failureOf(
      await h.authenticate({ authorization: bearer(orphan.token), tenantIds: [] }),
    )
    assert.equal(a.code === 'invalid_token' && a.reason, 'tenant_disabled')
    assert.equal(b.code === 'invalid_token' && b.reason, 'tenant_unknown')
  })

  test('PAT lookup throwing → unavailable (store, retry in 5 s), never a pass or a 401', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    h.lookups.failing = 'findPatByHash'
    const failure = failureOf(await h.authenticate({ authorization: bearer(token), tenantIds: [] }))
    assert.deepEqual(failure, { code: 'unavailable', dependency: 'store', retryAfterSeconds: 5 })
  })

  test('tenant lookup throwing on the PAT path → unavailable', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    h.lookups.failing = 'findTenant'
    const failure = failureOf(await h.authenticate({ authorization: bearer(token), tenantIds: [] }))
    assert.equal(failure.code, 'unavailable')
  })
})

describe('authenticate: JWT', () => {
  test('a verified JWT with the right X-Tenant-Id → its principal', async () => {
    const h = harness()
    const token = acceptJwt(h.jwt, { permissions: ['audit:read'], tokenId: 'jti-9' })
    const result = await h.authenticate({ authorization: bearer(token), tenantIds: ['acme'] })
    assert.deepEqual(result, {
      ok: true,
      principal: {
        tokenType: 'jwt',
        tenantId: 'acme',
        subject: 'user-1',
        permissions: ['audit:read'],
        tokenId: 'jti-9',
        expiresAt: NOW + HOUR_MS,
        issuer: 'https://idp.example',
        fingerprint: 'jwt:iss=https://idp.example;kid=key-1;sub=user-1',
      },
    })
    assert.equal(h.lookups.calls.findPatByHash, 0)
    assert.equal(h.lookups.calls.findTenant, 1)
  })

  test('no X-Tenant-Id → tenant_header_required', async () => {
    const h = harness()
    const token = acceptJwt(h.jwt)
    const result = await h.authenticate({ authorization: bearer(token), tenantIds: [] })
    assert.deepEqual(failureOf(result), { code: 'tenant_header_required' })
  })

  test('X-Tenant-Id not exactly equal → tenant_mismatch (case, spaces, another tenant)', async () => {
    const h = harness()
    addTenant(h.lookups, 'other')
    const token = acceptJwt(h.jwt)
    for (const value of ['other', 'ACME', 'Acme', 'acme ', ' acme', '', 'acme\t', 'acm']) {
      const result = await h.authenticate({ authorization: bearer(token), tenantIds: [value] })
      assert.equal(failureOf(result).code, 'tenant_mismatch', JSON.stringify(value))
    }
    assert.equal(h.lookups.calls.findTenant, 0, 'mismatch is decided before the tenant lookup')
  })

  test('two X-Tenant-Id headers with a JWT → tenant_mismatch', async () => {
    const h = harness()
    const token = acceptJwt(h.jwt)
    for (const tenantIds of [
      ['acme', 'acme'],
      ['acme', 'other'],
      ['other', 'acme'],
    ]) {
      const result = await h.authenticate({ authorization: bearer(token), tenantIds })
      assert.equal(failureOf(result).code, 'tenant_mismatch')
    }
  })

  test('the verifier’s failure is returned unchanged, before any tenant rule', async () => {
    const h = harness()
    const failures: AuthFailure[] = [
      { code: 'token_expired', detail: 'The access token has expired.' },
      { code: 'invalid_token', reason: 'unknown_issuer', detail: 'The access token is not valid.' },
      { code: 'unavailable', dependency: 'jwks', retryAfterSeconds: 30 },
    ]
    for (const failure of failures) {
      const token = rejectJwt(h.jwt, failure)
      const result = await h.authenticate({ authorization: bearer(token), tenantIds: [] })
      assert.deepEqual(failureOf(result), failure)
    }
    assert.equal(h.lookups.calls.findTenant, 0)
  })

  test('a JWT whose tenant is disabled or unknown → invalid_token', async () => {
    const h = harness()
    addTenant(h.lookups, 'sleepy', false)
    const disabled = acceptJwt(h.jwt, { tenantId: 'sleepy' })
    const unknown = acceptJwt(h.jwt, { tenantId: 'nobody', subject: 'user-2' })
    const a = failureOf(
      await h.authenticate({ authorization: bearer(disabled), tenantIds: ['sleepy'] }),
    )
    const b = failureOf(
      await h.authenticate({ authorization: bearer(unknown), tenantIds: ['nobody'] }),
    )
    assert.equal(a.code === 'invalid_token' && a.reason, 'tenant_disabled')
    assert.equal(b.code === 'invalid_token' && b.reason, 'tenant_unknown')
  })

  test('tenant lookup throwing on the JWT path → unavailable', async () => {
    const h = harness()
    const token = acceptJwt(h.jwt)
    h.lookups.failing = 'findTenant'
    const failure = failureOf(
      await h.authenticate({ authorization: bearer(token), tenantIds: ['acme'] }),
    )
    assert.deepEqual(failure, { code: 'unavailable', dependency: 'store', retryAfterSeconds: 5 })
  })
})

describe('sameTenantId', () => {
  test('is exact string equality, including lone surrogates and differing lengths', () => {
    assert.equal(sameTenantId('acme', 'acme'), true)
    assert.equal(sameTenantId('', ''), true)
    assert.equal(sameTenantId('acme', 'Acme'), false)
    assert.equal(sameTenantId('acme', 'acme '), false)
    assert.equal(sameTenantId('caf\u00e9', 'cafe\u0301'), false, 'no Unicode normalisation')
    assert.equal(sameTenantId('\ud800', '\ud801'), false, 'UTF-8 would map both to U+FFFD')
    assert.equal(sameTenantId('\ud800', '\ufffd'), false)
  })
})
