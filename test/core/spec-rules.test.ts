/**
 * One test per rule of SPEC.md §5.3 and row of §7, and per DESIGN.md "Authentication,
 * precisely" rule that the core decides, each run end to end through the core:
 * authenticate → authorize → failureResponse. JWTs come from an in-memory verifier; the
 * real verifier's own rules (signature, alg, claims) are tested with it in test/core/jwt*.
 * DESIGN rule 8 (authenticate before routing) is the server's and is tested there. The
 * request-shape table every level shares is test/spec/cases.ts (run by spec-table.test.ts);
 * this file keeps the per-rule checks that need the fakes (store calls, verifier inputs).
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { generatePat, hashPat } from '../../src/core/pat.ts'
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

type Outcome = Awaited<ReturnType<ReturnType<typeof harness>['request']>>

function expectStatus(outcome: Outcome, status: number, code: string): void {
  assert.ok(outcome.response, `expected ${status} ${code}, got a pass`)
  assert.equal(outcome.response.status, status)
  assert.equal(outcome.response.body.code, code)
  assert.equal(outcome.response.body.status, status)
}

function expectPass(outcome: Outcome): void {
  assert.equal(outcome.failure, undefined, JSON.stringify(outcome.failure))
  assert.equal(outcome.result.ok, true)
}

function challengeOf(outcome: Outcome): string | undefined {
  return outcome.response?.headers['www-authenticate']
}

describe('SPEC §5.3 rules', () => {
  test('SPEC 5.3 rule 1: JWT without X-Tenant-Id → 401 tenant_header_required; a wrong one → 401 tenant_mismatch', async () => {
    const h = harness()
    addTenant(h.lookups, 'other')
    const jwt = acceptJwt(h.jwt)
    expectStatus(await h.request({ authorization: bearer(jwt) }), 401, 'tenant_header_required')
    expectStatus(
      await h.request({ authorization: bearer(jwt), tenantIds: ['other'] }),
      401,
      'tenant_mismatch',
    )
    expectPass(await h.request({ authorization: bearer(jwt), tenantIds: ['acme'] }))
  })

  test('SPEC 5.3 rule 2: PAT without X-Tenant-Id → authenticated', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    const outcome = await h.request({ authorization: bearer(token) })
    expectPass(outcome)
    assert.equal(outcome.result.ok && outcome.result.principal.tenantId, 'acme')
  })

  test('SPEC 5.3 rule 3: no Authorization header → 401 missing_authorization', async () => {
    const h = harness()
    expectStatus(await h.request({ tenantIds: ['acme'] }), 401, 'missing_authorization')
  })

  test('SPEC 5.3 rule 4: invalid or expired token → 401 invalid_token / token_expired (PAT and JWT)', async () => {
    const h = harness()
    const unknownPat = generatePat()
    const expiredPat = addPat(h.lookups, { expiresAt: NOW - 1 }).token
    const badJwt = rejectJwt(h.jwt, {
      code: 'invalid_token',
      reason: 'bad_signature',
      detail: 'The access token is not valid.',
    })
    const expiredJwt = rejectJwt(h.jwt, {
      code: 'token_expired',
      detail: 'The access token has expired.',
    })
    expectStatus(await h.request({ authorization: bearer(unknownPat) }), 401, 'invalid_token')
    expectStatus(await h.request({ authorization: bearer(expiredPat) }), 401, 'token_expired')
    expectStatus(
      await h.request({ authorization: bearer(badJwt), tenantIds: ['acme'] }),
      401,
      'invalid_token',
    )
    expectStatus(
      await h.request({ authorization: bearer(expiredJwt), tenantIds: ['acme'] }),
      401,
      'token_expired',
    )
  })

  test('SPEC 5.3 rule 5: valid token lacking the endpoint permission → 403 insufficient_permission', async () => {
    const h = harness()
    const { token } = addPat(h.lookups, { permissions: ['tokens:read'] })
    const jwt = acceptJwt(h.jwt, { permissions: ['tokens:read'] })
    expectStatus(
      await h.request({ authorization: bearer(token) }, ['audit:read']),
      403,
      'insufficient_permission',
    )
    expectStatus(
      await h.request({ authorization: bearer(jwt), tenantIds: ['acme'] }, ['audit:read']),
      403,
      'insufficient_permission',
    )
    expectPass(await h.request({ authorization: bearer(token) }, ['tokens:read']))
  })

  test('SPEC 5.3 rule 6: anything but exactly "Authorization: Bearer <token>" → 401 malformed_authorization', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    for (const value of [
      `bearer ${token}`,
      `Bearer  ${token}`,
      `Bearer ${token} `,
      `Token ${token}`,
      token,
    ]) {
      expectStatus(await h.request({ authorization: [value] }), 401, 'malformed_authorization')
    }
    expectPass(await h.request({ authorization: [`Bearer ${token}`] }))
  })

  test('SPEC 5.3 rule 7: a PAT is recognised by the pat_ prefix (PAT_ takes the JWT path)', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    expectPass(await h.request({ authorization: bearer(token) }))
    const upper = `PAT_${token.slice(4)}`
    expectStatus(
      await h.request({ authorization: bearer(upper), tenantIds: ['acme'] }),
      401,
      'invalid_token',
    )
    assert.deepEqual(h.jwt.verified, [upper])
  })
})

describe('SPEC §7 error rows', () => {
  test('SPEC 7: Authorization header missing → 401', async () => {
    const outcome = await harness().request({})
    expectStatus(outcome, 401, 'missing_authorization')
    assert.equal(challengeOf(outcome), 'Bearer realm="tokengate"')
  })

  test('SPEC 7: token invalid or expired → 401', async () => {
    const h = harness()
    const expired = addPat(h.lookups, { expiresAt: NOW }).token
    const revoked = addPat(h.lookups, { patch: { revokedAt: NOW - HOUR_MS } }).token
    for (const token of [expired, revoked, generatePat(), 'not-a-jwt']) {
      const outcome = await h.request({ authorization: bearer(token), tenantIds: ['acme'] })
      assert.equal(outcome.response?.status, 401)
      assert.match(challengeOf(outcome) ?? '', /error="invalid_token"/)
    }
  })

  test('SPEC 7: JWT used and X-Tenant-Id missing or incorrect → 401', async () => {
    const h = harness()
    const jwt = acceptJwt(h.jwt)
    for (const tenantIds of [[], ['nope'], ['acme', 'acme']]) {
      const outcome = await h.request({ authorization: bearer(jwt), tenantIds })
      assert.equal(outcome.response?.status, 401, JSON.stringify(tenantIds))
    }
  })

  test('SPEC 7: caller authenticated but lacking the permission the endpoint requires → 403', async () => {
    const h = harness()
    const { token } = addPat(h.lookups, { permissions: [] })
    const outcome = await h.request({ authorization: bearer(token) }, ['tokens:revoke'])
    expectStatus(outcome, 403, 'insufficient_permission')
    assert.equal(
      challengeOf(outcome),
      'Bearer realm="tokengate", error="insufficient_scope", scope="tokens:revoke"',
    )
  })
})

describe('DESIGN "Authentication, precisely" rules (core)', () => {
  test('DESIGN rule 1: no Authorization header → 401 missing_authorization, challenge without error code', async () => {
    const outcome = await harness().request({})
    expectStatus(outcome, 401, 'missing_authorization')
    assert.equal(challengeOf(outcome), 'Bearer realm="tokengate"')
  })

  test('DESIGN rule 2: bearer, two spaces, trailing space, tab, empty, other scheme, two headers → 401 malformed_authorization', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    const cases = [
      [`bearer ${token}`],
      [`Bearer  ${token}`],
      [`Bearer ${token} `],
      [`Bearer\t${token}`],
      ['Bearer '],
      [`Basic ${token}`],
      [`Bearer ${token}`, `Bearer ${token}`],
    ]
    for (const authorization of cases) {
      const outcome = await h.request({ authorization })
      expectStatus(outcome, 401, 'malformed_authorization')
      assert.match(challengeOf(outcome) ?? '', /error="invalid_request"/)
    }
    assert.equal(h.lookups.calls.findPatByHash, 0)
  })

  test('DESIGN rule 3: a token starting with pat_ takes the PAT path; anything else the JWT path', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    await h.request({ authorization: bearer(token) })
    assert.equal(h.lookups.calls.findPatByHash, 1)
    assert.equal(h.jwt.verified.length, 0)
    await h.request({ authorization: bearer('eyJ.eyJ.sig'), tenantIds: ['acme'] })
    assert.equal(h.lookups.calls.findPatByHash, 1)
    assert.deepEqual(h.jwt.verified, ['eyJ.eyJ.sig'])
  })

  test('DESIGN rule 4: PAT format checked before the store, looked up by SHA-256; unknown, revoked, expired → 401; X-Tenant-Id optional but must match', async () => {
    const h = harness()
    addTenant(h.lookups, 'other')
    const { token, record } = addPat(h.lookups)
    assert.equal(record.tokenHash, hashPat(token))
    const garbage = `${token.slice(0, -1)}${token.endsWith('0') ? '1' : '0'}`
    expectStatus(await h.request({ authorization: bearer(garbage) }), 401, 'invalid_token')
    assert.equal(h.lookups.calls.findPatByHash, 0, 'garbage reached the store')
    expectPass(await h.request({ authorization: bearer(token) }))
    expectPass(await h.request({ authorization: bearer(token), tenantIds: ['acme'] }))
    expectStatus(
      await h.request({ authorization: bearer(token), tenantIds: ['other'] }),
      401,
      'tenant_mismatch',
    )
    const revoked = addPat(h.lookups, { patch: { revokedAt: NOW } }).token
    const expired = addPat(h.lookups, { expiresAt: NOW }).token
    expectStatus(await h.request({ authorization: bearer(revoked) }), 401, 'invalid_token')
    expectStatus(await h.request({ authorization: bearer(expired) }), 401, 'token_expired')
    expectStatus(await h.request({ authorization: bearer(generatePat()) }), 401, 'invalid_token')
  })

  test('DESIGN rule 5 (core part): the JWT verifier decides; invalid → 401 invalid_token, expired → 401 token_expired', async () => {
    const h = harness()
    const invalid = rejectJwt(h.jwt, {
      code: 'invalid_token',
      reason: 'algorithm_not_allowed',
      detail: 'The access token is not valid.',
    })
    const expired = rejectJwt(h.jwt, {
      code: 'token_expired',
      detail: 'The access token has expired.',
    })
    const a = await h.request({ authorization: bearer(invalid), tenantIds: ['acme'] })
    const b = await h.request({ authorization: bearer(expired), tenantIds: ['acme'] })
    expectStatus(a, 401, 'invalid_token')
    expectStatus(b, 401, 'token_expired')
    assert.match(challengeOf(a) ?? '', /error="invalid_token"/)
    assert.match(challengeOf(b) ?? '', /error="invalid_token"/)
  })

  test('DESIGN rule 6: JWT + X-Tenant-Id missing → tenant_header_required; not byte-for-byte equal → tenant_mismatch; tenant must exist and be enabled', async () => {
    const h = harness()
    addTenant(h.lookups, 'off', false)
    const jwt = acceptJwt(h.jwt)
    expectStatus(await h.request({ authorization: bearer(jwt) }), 401, 'tenant_header_required')
    for (const wrong of ['ACME', 'acme ', ' acme', 'acme\u200b']) {
      expectStatus(
        await h.request({ authorization: bearer(jwt), tenantIds: [wrong] }),
        401,
        'tenant_mismatch',
      )
    }
    const disabled = acceptJwt(h.jwt, { tenantId: 'off' })
    const unknown = acceptJwt(h.jwt, { tenantId: 'ghost', subject: 'someone-else' })
    expectStatus(
      await h.request({ authorization: bearer(disabled), tenantIds: ['off'] }),
      401,
      'invalid_token',
    )
    expectStatus(
      await h.request({ authorization: bearer(unknown), tenantIds: ['ghost'] }),
      401,
      'invalid_token',
    )
  })

  test('DESIGN rule 7: missing permission → 403 insufficient_permission, and 401 is always decided before 403', async () => {
    const h = harness()
    const weak = addPat(h.lookups, { permissions: [] })
    const expired = addPat(h.lookups, { permissions: [], expiresAt: NOW })
    const jwt = acceptJwt(h.jwt, { permissions: [] })
    expectStatus(
      await h.request({ authorization: bearer(weak.token) }, ['audit:read']),
      403,
      'insufficient_permission',
    )
    expectStatus(
      await h.request({ authorization: bearer(expired.token) }, ['audit:read']),
      401,
      'token_expired',
    )
    expectStatus(
      await h.request({ authorization: bearer(jwt) }, ['audit:read']),
      401,
      'tenant_header_required',
    )
    expectStatus(await h.request({}, ['audit:read']), 401, 'missing_authorization')
  })
})
