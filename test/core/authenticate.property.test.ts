/**
 * Property tests: whatever arrives in the headers, the core answers with a principal or a
 * failure (never a throw), and no failure response ever echoes the token.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import fc from 'fast-check'
import { sameTenantId } from '../../src/core/authenticate.ts'
import { parseAuthorization } from '../../src/core/credentials.ts'
import { checkPatFormat, generatePat, isPatToken } from '../../src/core/pat.ts'
import { acceptJwt, addPat, bearer, harness, jwtLike } from '../helpers/core-fakes.ts'

const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

const h = harness()
const validPat = addPat(h.lookups).token
const validJwt = acceptJwt(h.jwt)

const base62 = (length: number) =>
  fc.string({ unit: fc.constantFrom(...BASE62), minLength: length, maxLength: length })

/** Tokens: arbitrary Unicode and control characters, b64tokens, PAT and JWT look-alikes. */
const tokenArb: fc.Arbitrary<string> = fc.oneof(
  fc.string({ unit: 'binary' }),
  fc.string({ unit: 'grapheme' }),
  fc.string({ unit: 'binary-ascii', maxLength: 80 }),
  fc.stringMatching(/^[A-Za-z0-9\-._~+/]{1,60}=*$/),
  base62(38).map((body) => `pat_${body}`),
  base62(38).map((body) => `PAT_${body}`),
  fc.integer({ min: 0, max: 41 }).chain((i) =>
    fc.constantFrom(...`${BASE62}-._~+/= \t\r\n\u0000é`).map((c) => {
      const token = generatePat()
      return token.slice(0, i) + c + token.slice(i + 1)
    }),
  ),
  fc.constant(validPat),
  fc.constant(validJwt),
  fc
    .record({ kid: fc.string(), iss: fc.string(), sub: fc.string({ unit: 'binary' }) })
    .map(({ kid, iss, sub }) => jwtLike({ alg: 'ES256', kid }, { iss, sub })),
)

/** Header values built around a token, well-formed or nearly so. */
const headerArb = tokenArb.chain((token) =>
  fc
    .constantFrom(
      (t: string) => `Bearer ${t}`,
      (t: string) => `bearer ${t}`,
      (t: string) => `Bearer  ${t}`,
      (t: string) => `Bearer ${t} `,
      (t: string) => `Bearer\t${t}`,
      (t: string) => `Bearer ${t}\r\nX-Injected: 1`,
      (t: string) => `Basic ${t}`,
      (t: string) => t,
    )
    .map((wrap) => ({ token, value: wrap(token) })),
)

const tenantArb = fc.oneof(fc.constant('acme'), fc.constant('ACME'), fc.string({ unit: 'binary' }))

/** Everything a client could see: status, headers and body, serialised. */
function leaks(serialised: string, tokens: readonly string[]): string | undefined {
  return tokens.find((token) => token.length > 8 && serialised.includes(token))
}

describe('authenticate (properties)', () => {
  test('parseAuthorization never throws; accepts only one exact "Bearer <b64token>"', () => {
    fc.assert(
      fc.property(fc.array(headerArb, { maxLength: 3 }), (headers) => {
        const values = headers.map((header) => header.value)
        const result = parseAuthorization(values)
        if (result.ok) {
          assert.equal(values.length, 1)
          assert.equal(values[0], `Bearer ${result.token}`)
          assert.match(result.token, B64TOKEN)
          return
        }
        if (values.length === 0) assert.deepEqual(result.failure, { code: 'missing_authorization' })
        else {
          assert.equal(result.failure.code, 'malformed_authorization')
          assert.equal(
            leaks(
              JSON.stringify(result.failure),
              headers.map((x) => x.token),
            ),
            undefined,
          )
        }
      }),
      { numRuns: 2_000 },
    )
  })

  test('sameTenantId is exactly ===, lone surrogates and one-unit differences included', () => {
    // UTF-16 units of every kind: ASCII, Latin-1, astral pairs, lone surrogates.
    const unit = fc.oneof(
      fc.constantFrom('a', 'b', 'A', '-', '\u00e9', '\u0000', '\ud800', '\udc00', '\udfff'),
      fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
    )
    const id = fc.string({ unit, maxLength: 12 })
    fc.assert(
      fc.property(id, id, fc.nat(), fc.integer({ min: 1, max: 0xffff }), (a, b, at, flip) => {
        assert.equal(sameTenantId(a, b), a === b)
        assert.equal(sameTenantId(a, a.slice()), true)
        if (a.length === 0) return
        const i = at % a.length
        const changed = a.slice(0, i) + String.fromCharCode(a.charCodeAt(i) ^ flip) + a.slice(i + 1)
        assert.equal(sameTenantId(a, changed), false)
      }),
      { numRuns: 2_000 },
    )
  })

  test('authenticate + failureResponse: always a principal or a failure, never the token on the wire', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(headerArb, { maxLength: 2 }),
        fc.array(tenantArb, { maxLength: 2 }),
        fc.array(fc.constantFrom('tokens:read', 'audit:read'), { maxLength: 2 }),
        fc.constantFrom(undefined, 'findPatByHash', 'findTenant'),
        async (headers, tenantIds, required, failing) => {
          h.lookups.failing = failing as typeof h.lookups.failing
          const tokens = headers.map((header) => header.token)
          const outcome = await h.request(
            { authorization: headers.map((header) => header.value), tenantIds },
            required,
          )
          if (outcome.result.ok) {
            assert.ok(
              outcome.result.principal.tokenType === 'pat' ||
                outcome.result.principal.tokenType === 'jwt',
            )
            assert.equal(leaks(outcome.result.principal.fingerprint, tokens), undefined)
            // Every path consults findTenant; only the PAT path consults findPatByHash.
            assert.notEqual(failing, 'findTenant', 'authenticated while the store was down')
            if (outcome.result.principal.tokenType === 'pat') {
              assert.notEqual(failing, 'findPatByHash', 'PAT accepted while the store was down')
            }
          } else {
            assert.equal(typeof outcome.result.failure.code, 'string')
          }
          if (outcome.response !== undefined) {
            const wire = JSON.stringify(outcome.response)
            assert.equal(leaks(wire, tokens), undefined, `token echoed in ${wire}`)
            assert.ok([401, 403, 503].includes(outcome.response.status))
            for (const value of Object.values(outcome.response.headers)) {
              assert.match(value, /^[\x20-\x7e]*$/, 'header value with non-printable characters')
            }
          }
          // A well-formed PAT with the store down is a 503, never a pass and never a 401.
          const only = headers.length === 1 ? headers[0] : undefined
          if (
            failing === 'findPatByHash' &&
            only !== undefined &&
            only.value === `Bearer ${only.token}` &&
            isPatToken(only.token) &&
            checkPatFormat(only.token).ok
          ) {
            assert.equal(outcome.response?.status, 503)
          }
        },
      ),
      { numRuns: 1_500 },
    )
    h.lookups.failing = undefined
  })

  test('the generators do reach both successful paths', async () => {
    const pat = await h.request({ authorization: bearer(validPat) })
    const jwt = await h.request({ authorization: bearer(validJwt), tenantIds: ['acme'] })
    assert.ok(pat.result.ok && jwt.result.ok)
  })
})
