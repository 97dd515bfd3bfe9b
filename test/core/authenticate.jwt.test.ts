/**
 * The authenticator with the real JWT verifier (src/core/jwt.ts) and real signed tokens:
 * the SPEC §5.3 JWT rules end to end, and the wire response never echoing the token.
 */
import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createHash } from 'node:crypto'
import { after, describe, test } from 'node:test'
import fc from 'fast-check'
import {
  createAuthenticator,
  createMaybeSyncAuthenticator,
  isPromiseLike,
  maybeSyncOf,
} from '../../src/core/authenticate.ts'
import type { AuthFailure } from '../../src/core/failure.ts'
import { createJwtVerifier } from '../../src/core/jwt.ts'
import type { AuthLookups, JwtVerifier } from '../../src/core/ports.ts'
import type { AuthResult } from '../../src/core/principal.ts'
import { failureResponse } from '../../src/http/failure-response.ts'
import { addTenant, bearer, fakeLookups } from '../helpers/core-fakes.ts'
import {
  createManualClock,
  createTestIssuer,
  signCompact,
  TEST_ISSUER,
  TEST_TENANT,
} from '../helpers/jwt.ts'

const clock = createManualClock()
const issuer = createTestIssuer({ alg: 'ES256', clock })
const verifier = createJwtVerifier([issuer.config], { clock })
const lookups = fakeLookups()
addTenant(lookups, TEST_TENANT)
addTenant(lookups, 'tenant-b')
const authenticate = createAuthenticator({ lookups, jwt: verifier, clock })
after(() => verifier.close())

function failureOf(result: AuthResult): AuthFailure {
  assert.equal(result.ok, false, 'expected a failure')
  if (result.ok) throw new Error('unreachable')
  return result.failure
}

describe('authenticate with the real JWT verifier', () => {
  test('a signed JWT with the right X-Tenant-Id → principal with issuer, subject and a log-safe fingerprint', async () => {
    const token = await issuer.sign({ permissions: ['audit:read'], jti: 'j-1' })
    const result = await authenticate({ authorization: bearer(token), tenantIds: [TEST_TENANT] })
    assert.ok(result.ok, JSON.stringify(result))
    assert.equal(result.principal.tokenType, 'jwt')
    assert.equal(result.principal.tenantId, TEST_TENANT)
    assert.equal(result.principal.issuer, TEST_ISSUER)
    assert.equal(result.principal.subject, 'user-1')
    assert.deepEqual(result.principal.permissions, ['audit:read'])
    assert.equal(result.principal.tokenId, 'j-1')
    assert.equal(
      result.principal.fingerprint,
      `jwt:iss=${TEST_ISSUER};kid=${issuer.kid};sub=user-1`,
    )
    assert.ok(!result.principal.fingerprint.includes(token.split('.')[2] as string))
  })

  test('SPEC 5.3 rule 1 with a real JWT: no X-Tenant-Id → tenant_header_required; another tenant → tenant_mismatch', async () => {
    const token = await issuer.sign()
    assert.deepEqual(
      failureOf(await authenticate({ authorization: bearer(token), tenantIds: [] })),
      {
        code: 'tenant_header_required',
      },
    )
    const mismatch = await authenticate({ authorization: bearer(token), tenantIds: ['tenant-b'] })
    assert.equal(failureOf(mismatch).code, 'tenant_mismatch')
  })

  test('SPEC 5.3 rule 4 with real JWTs: expired → token_expired; tampered or alg none → invalid_token', async () => {
    const expired = await issuer.sign({}, { nowMs: clock.now() - 3_600_000, expiresInSec: 60 })
    const valid = await issuer.sign()
    const [header, payload] = valid.split('.') as [string, string]
    const forgedPayload = Buffer.from(
      JSON.stringify({ ...issuer.claims(), permissions: ['tokens:revoke'] }),
    ).toString('base64url')
    const tampered = `${header}.${forgedPayload}.${valid.split('.')[2]}`
    const none = signCompact({ alg: 'none' }, issuer.claims(), undefined)
    const cases: [string, string][] = [
      [expired, 'token_expired'],
      [tampered, 'invalid_token'],
      [none, 'invalid_token'],
      [`${header}.${payload}.`, 'invalid_token'],
    ]
    for (const [token, code] of cases) {
      const result = await authenticate({ authorization: bearer(token), tenantIds: [TEST_TENANT] })
      const failure = failureOf(result)
      assert.equal(failure.code, code)
      const wire = JSON.stringify(failureResponse(failure, 'r'))
      assert.equal(failureResponse(failure, 'r').status, 401)
      assert.ok(!wire.includes(token), 'token echoed')
      assert.ok(!wire.includes(issuer.kid ?? '\u0000'), 'kid echoed')
    }
  })

  test('arbitrary JWT-ish input through the real verifier: never throws, never echoed', async () => {
    const segment = fc
      .string({ unit: 'binary-ascii', maxLength: 40 })
      .map((text) => Buffer.from(text).toString('base64url'))
    const tokenArb = fc.oneof(
      fc.tuple(segment, segment, segment).map((parts) => parts.join('.')),
      fc.stringMatching(/^[A-Za-z0-9\-._~+/]{9,80}$/),
    )
    await fc.assert(
      fc.asyncProperty(tokenArb, async (token) => {
        const result = await authenticate({
          authorization: bearer(token),
          tenantIds: [TEST_TENANT],
        })
        const failure = failureOf(result)
        assert.ok(!JSON.stringify(failureResponse(failure, 'r')).includes(token))
      }),
      { numRuns: 300 },
    )
  })
})

describe('the maybe-synchronous JWT path (what the server calls)', () => {
  // Lookups that answer at once, as the server's cached lookups do on a hit.
  const syncLookups: AuthLookups = {
    findPatByHash: () => undefined,
    findTenant: (id) => lookups.tenants.get(id),
  }
  const maybeSync = createMaybeSyncAuthenticator({ lookups: syncLookups, jwt: verifier, clock })

  test('a JWT with a static key is answered without a promise, cold and cached, with the async result', async () => {
    const token = await issuer.sign({ permissions: ['audit:read'], jti: 'sync-1' })
    const input = { authorization: bearer(token), tenantIds: [TEST_TENANT] }
    const cold = verifier.verifyMaybeSync?.(token)
    assert.ok(cold !== undefined && !isPromiseLike(cold), 'cold verification returned a promise')
    const first = maybeSync(input)
    assert.ok(!isPromiseLike(first), 'the cached verification returned a promise')
    assert.deepEqual(first, await authenticate(input))
    const wrongTenant = maybeSync({ authorization: bearer(token), tenantIds: ['tenant-b'] })
    assert.ok(!isPromiseLike(wrongTenant))
    assert.equal(failureOf(wrongTenant).code, 'tenant_mismatch')
  })

  test("maybeSyncOf: the public factory's pipeline answers a cached JWT without a promise, with the async result; any other function is kept", async () => {
    const publicAuth = createAuthenticator({ lookups: syncLookups, jwt: verifier, clock })
    const token = await issuer.sign({ jti: 'public-1' })
    const input = { authorization: bearer(token), tenantIds: [TEST_TENANT] }
    const viaPromise = await publicAuth(input)
    const direct = maybeSyncOf(publicAuth)(input)
    assert.ok(!isPromiseLike(direct), "the public authenticator's pipeline returned a promise")
    assert.deepEqual(direct, viaPromise)
    const wrapped: typeof publicAuth = (i) => publicAuth(i)
    assert.equal(maybeSyncOf(wrapped), wrapped)
  })

  test('a repeated JWT gets the same frozen principal object; another token its own', async () => {
    const token = await issuer.sign({ jti: 'same-1' })
    const other = await issuer.sign({ jti: 'same-2' })
    const principalOf = async (t: string) => {
      const result = await authenticate({ authorization: bearer(t), tenantIds: [TEST_TENANT] })
      assert.ok(result.ok)
      return result.principal
    }
    const first = await principalOf(token)
    assert.equal(await principalOf(token), first)
    assert.ok(Object.isFrozen(first))
    assert.notEqual(await principalOf(other), first)
    assert.equal((await principalOf(other)).tokenId, 'same-2')
  })

  test('a repeated cached JWT gets the same frozen allowed result, and its tenant is still checked per request', async () => {
    const tenantId = 'tenant-memo'
    const tenant = addTenant(lookups, tenantId)
    const token = await issuer.sign({ jti: 'memo-1', tenant_id: tenantId })
    const input = { authorization: bearer(token), tenantIds: [tenantId] }
    const first = maybeSync(input)
    assert.ok(!isPromiseLike(first) && first.ok, JSON.stringify(first))
    assert.ok(Object.isFrozen(first))
    assert.equal(maybeSync(input), first)
    lookups.tenants.set(tenantId, { ...tenant, enabled: false })
    const disabled = maybeSync(input)
    assert.ok(!isPromiseLike(disabled))
    assert.equal(failureOf(disabled).code, 'invalid_token')
    lookups.tenants.set(tenantId, tenant)
    assert.equal(maybeSync(input), first)
  })

  test('a tokenSha256 hint reaches the verifier for exactly its token (the cache key), never for another', async () => {
    const token = await issuer.sign({ jti: 'hint-1' })
    const seen: Array<string | undefined> = []
    const spy: JwtVerifier = {
      verify: (t) => verifier.verify(t),
      verifyMaybeSync: (t, sha256Hex) => {
        seen.push(sha256Hex)
        return verifier.verifyMaybeSync?.(t, sha256Hex) ?? verifier.verify(t)
      },
      close: () => {},
    }
    const auth = createMaybeSyncAuthenticator({ lookups: syncLookups, jwt: spy, clock })
    const digest = createHash('sha256').update(token).digest('hex')
    const hinted = auth({
      authorization: bearer(token),
      tenantIds: [TEST_TENANT],
      tokenSha256: { token, sha256Hex: digest },
    })
    assert.ok(!isPromiseLike(hinted) && hinted.ok)
    const foreign = auth({
      authorization: bearer(token),
      tenantIds: [TEST_TENANT],
      tokenSha256: { token: `${token}x`, sha256Hex: 'f'.repeat(64) },
    })
    assert.ok(!isPromiseLike(foreign) && foreign.ok)
    assert.deepEqual(seen, [digest, undefined])
  })

  test('a verifier that throws makes the result reject (fail closed), never throw or pass', async () => {
    const broken: JwtVerifier = {
      verify: () => Promise.reject(new Error('bug')),
      verifyMaybeSync: () => {
        throw new Error('bug')
      },
      close: () => {},
    }
    const auth = createMaybeSyncAuthenticator({ lookups: syncLookups, jwt: broken, clock })
    const token = await issuer.sign()
    const result = auth({ authorization: bearer(token), tenantIds: [TEST_TENANT] })
    assert.ok(isPromiseLike(result))
    await assert.rejects(Promise.resolve(result), /bug/)
  })

  test('a verifier without verifyMaybeSync is awaited through verify', async () => {
    const token = await issuer.sign({ jti: 'sync-2' })
    const plain: JwtVerifier = { verify: (t) => verifier.verify(t), close: () => {} }
    const auth = createMaybeSyncAuthenticator({ lookups: syncLookups, jwt: plain, clock })
    const result = auth({ authorization: bearer(token), tenantIds: [TEST_TENANT] })
    assert.ok(isPromiseLike(result))
    assert.equal((await result).ok, true)
  })
})
