/**
 * Differential test: the production verifier (node:crypto, src/core/jwt.ts) against the
 * reference, jose's `jwtVerify` on the same bound keys with the same options, followed by
 * the same tokengate claim rules. Both must accept the same tokens with the same claims, on
 * the JWT test table's tokens and on a generated corpus of mutated tokens.
 *
 * Two documented differences, where the production verifier is stricter (src/core/jwt-jws.ts,
 * src/core/jwt.ts); every disagreement must be one of them, and both are exercised here:
 * - non-canonical base64url (`=` padding, whitespace, non-zero trailing bits): refused;
 * - a `b64` header parameter other than `true` outside `crit`: refused (jose ignores it).
 */
import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createPublicKey, createSecretKey, type KeyObject } from 'node:crypto'
import { describe, test } from 'node:test'
import fc from 'fast-check'
import { jwtVerify } from 'jose'
import {
  DEFAULT_ALGORITHMS,
  defaultPermissionsFormat,
  type IssuerConfig,
} from '../../src/core/issuer.ts'
import { createJwtVerifier } from '../../src/core/jwt.ts'
import { checkClaims } from '../../src/core/jwt-claims.ts'
import { decodeBase64url } from '../../src/core/jwt-jws.ts'
import { type BoundKey, bindJwk, bindPem, bindSecret, selectKey } from '../../src/core/jwt-keys.ts'
import type { JwtOutcome, VerifiedJwt } from '../../src/core/ports.ts'
import {
  createManualClock,
  createTestIssuer,
  generateTestKeyPair,
  signCompact,
  signInput,
  TEST_AUDIENCE,
  TEST_EPOCH_MS,
  type TestAlgorithm,
  type TestIssuer,
} from '../helpers/jwt.ts'

const NOW_SEC = TEST_EPOCH_MS / 1000
const TOLERANCE_SEC = 30
const MAX_LIFETIME_SEC = 86_400
const ALGORITHMS: TestAlgorithm[] = [
  'RS256',
  'RS384',
  'PS256',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'HS256',
  'HS512',
]

/**
 * The bound keys of an issuer, built from its configuration exactly as the verifier does,
 * each with the same key material as a KeyObject for jose (the reference).
 */
function boundKeysOf(config: IssuerConfig): { bound: BoundKey; material: KeyObject }[] {
  const source = config.keySource
  if (source.kind === 'jwks') {
    return source.jwks.keys.map((jwk) => {
      const { alg: _alg, use: _use, key_ops: _ops, ...key } = jwk
      return {
        bound: bindJwk(jwk),
        material: createPublicKey({ key: key as never, format: 'jwk' }),
      }
    })
  }
  if (source.kind === 'pem') {
    return [
      {
        bound: bindPem(source.pem, source.algorithm, source.kid),
        material: createPublicKey(source.pem),
      },
    ]
  }
  if (source.kind === 'secret') {
    return [
      {
        bound: bindSecret(source.secret, source.algorithm),
        material: createSecretKey(Buffer.from(source.secret, 'base64url')),
      },
    ]
  }
  throw new Error(`no reference keys for ${source.kind}`)
}

/** jose `jwtVerify` with the production options, then the same tokengate claim rules. */
function referenceVerifier(issuer: TestIssuer) {
  const config = issuer.config
  const pairs = boundKeysOf(config)
  const keys = pairs.map((pair) => pair.bound)
  const source = config.keySource
  const ignoreKid = source.kind === 'secret' || (source.kind === 'pem' && source.kid === undefined)
  const permissionsClaim = config.permissionsClaim ?? 'permissions'
  const rules = {
    tenant: config.tenant ?? { claim: 'tenant_id' },
    permissionsClaim,
    permissionsFormat: config.permissionsFormat ?? defaultPermissionsFormat(permissionsClaim),
  }
  return async (token: string): Promise<VerifiedJwt | undefined> => {
    try {
      const { payload, protectedHeader } = await jwtVerify(
        token,
        (header) => {
          const kid = header.kid as unknown
          if (kid !== undefined && typeof kid !== 'string') throw new Error('kid')
          const selected = selectKey(keys, String(header.alg), ignoreKid ? undefined : kid)
          if (!selected.ok) throw new Error(selected.reason)
          return pairs[keys.indexOf(selected.key)]?.material as KeyObject
        },
        {
          algorithms: [
            ...(config.algorithms ??
              (source.kind === 'secret' ? [source.algorithm] : DEFAULT_ALGORITHMS)),
          ],
          issuer: config.issuer,
          audience: [...config.audiences],
          requiredClaims: ['exp'],
          clockTolerance: TOLERANCE_SEC,
          currentDate: new Date(TEST_EPOCH_MS),
        },
      )
      const kid = protectedHeader.kid ?? keys.find((k) => k.alg === protectedHeader.alg)?.kid
      const checked = checkClaims(payload as Record<string, unknown>, rules, {
        issuer: config.issuer,
        keyId: kid,
        nowSec: NOW_SEC,
        toleranceSec: TOLERANCE_SEC,
        maxLifetimeSec: MAX_LIFETIME_SEC,
      })
      return checked.ok ? checked.jwt : undefined
    } catch {
      return undefined
    }
  }
}

/** Why the production verifier may refuse a token jose accepts (see the file note). */
function documentedDifference(token: string): string | undefined {
  const segments = token.split('.')
  if (segments.some((segment) => decodeBase64url(segment) === undefined)) return 'encoding'
  try {
    const header = JSON.parse(Buffer.from(segments[0] ?? '', 'base64url').toString('utf8'))
    const crit = Array.isArray(header.crit) ? header.crit : []
    if (header.b64 !== undefined && header.b64 !== true && !crit.includes('b64')) return 'b64'
  } catch {}
  return undefined
}

interface Harness {
  readonly issuer: TestIssuer
  /** Compares both verifiers on one token; returns the documented difference, if any. */
  compare(token: string): Promise<string | undefined>
}

function harness(alg: TestAlgorithm, keySource: 'jwks' | 'pem' = 'jwks'): Harness {
  const clock = createManualClock()
  // Non-HMAC issuers allow their own algorithm and the common ones, so that tokens re-signed
  // under another algorithm reach key selection rather than stopping at the allowlist.
  const algorithms = alg.startsWith('HS')
    ? undefined
    : [...new Set([alg, 'RS256', 'PS256', 'ES256', 'EdDSA'])]
  const issuer = createTestIssuer({ alg, clock, keySource, algorithms })
  const fast = createJwtVerifier([issuer.config], {
    clock,
    cacheMaxEntries: 0,
    clockToleranceSec: TOLERANCE_SEC,
    maxLifetimeSec: MAX_LIFETIME_SEC,
  })
  const reference = referenceVerifier(issuer)
  return {
    issuer,
    async compare(token) {
      const ours: JwtOutcome = await fast.verify(token)
      const theirs = await reference(token)
      if (ours.ok && theirs !== undefined) {
        assert.deepEqual(ours.jwt, theirs, `claims differ for ${token}`)
        return undefined
      }
      if (!ours.ok && theirs === undefined) return undefined
      const difference = documentedDifference(token)
      assert.ok(
        !ours.ok && difference !== undefined && ours.failure.code === 'invalid_token',
        `verifiers disagree (ours ${ours.ok ? 'accepts' : JSON.stringify(ours.failure)}) on ${token}`,
      )
      return difference
    },
  }
}

const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')

/** The tokens of test/core/jwt.test.ts's table, for one issuer. */
async function tableTokens(issuer: TestIssuer): Promise<string[]> {
  const alg = issuer.alg
  const sign = (claims: Record<string, unknown> = {}, header: Record<string, unknown> = {}) =>
    issuer.sign(claims, { header })
  const claimVariants: Record<string, unknown>[] = [
    {},
    { jti: 'token-1' },
    { iat: NOW_SEC - 600, exp: NOW_SEC - 31 },
    { iat: NOW_SEC - 600, exp: NOW_SEC - 29 },
    { iat: NOW_SEC - 600, exp: NOW_SEC - 30 },
    { nbf: NOW_SEC + 31 },
    { nbf: NOW_SEC + 30 },
    { nbf: 'soon' },
    { iat: NOW_SEC + 31 },
    { iat: NOW_SEC + 30 },
    { iat: '0' },
    { exp: undefined },
    { exp: String(NOW_SEC + 60) },
    { exp: null },
    { iat: NOW_SEC - 10, exp: NOW_SEC + 86_391 },
    { iat: NOW_SEC - 10, exp: NOW_SEC + 86_390 },
    { iat: undefined, exp: NOW_SEC + 86_401 },
    { iat: undefined, exp: NOW_SEC + 86_400 },
    { iss: 'https://evil.test' },
    { iss: undefined },
    { iss: ['https://issuer.test'] },
    { aud: 'someone-else' },
    { aud: ['other', TEST_AUDIENCE] },
    { aud: [TEST_AUDIENCE, 5] },
    { aud: [] },
    { aud: undefined },
    { aud: 7 },
    { sub: undefined },
    { sub: '' },
    { sub: 42 },
    { sub: ['user-1'] },
    { jti: 7 },
    { tenant_id: undefined },
    { tenant_id: '' },
    { tenant_id: 12 },
    { tenant_id: ['tenant-a'] },
    { permissions: ['a:read', 'b:write'] },
    { permissions: 'a b' },
    { permissions: undefined },
    { permissions: 42 },
    { permissions: ['ok', 3] },
    { permissions: [''] },
    { permissions: null },
    { pad: 'x'.repeat(1200) },
  ]
  const tokens = await Promise.all(claimVariants.map((claims) => sign(claims)))
  const [header, , signature] = (await sign()).split('.')
  tokens.push(`${header}.${encode(issuer.claims({ sub: 'admin' }))}.${signature}`)
  tokens.push(await createTestIssuer({ alg, kid: issuer.kid }).sign())
  tokens.push(await sign({}, { kid: 'not-a-known-key' }), await sign({}, { kid: 1 }))
  tokens.push(await sign({}, { kid: undefined }))
  if (issuer.publicKey !== undefined) {
    // The same RSA private key under another RSA algorithm (the table's RS256 → PS256/RS512).
    if (alg.startsWith('RS') || alg.startsWith('PS')) {
      for (const other of ['PS256', 'RS512', 'RS256'] as const) {
        tokens.push(
          signCompact({ alg: other, kid: issuer.kid }, issuer.claims(), issuer.privateKey),
        )
      }
    }
    const secrets = [
      Buffer.from(issuer.publicPem ?? ''),
      Buffer.from(JSON.stringify(issuer.publicJwk)),
      issuer.publicKey.export({ format: 'der', type: 'spki' }),
    ]
    for (const secret of secrets) {
      tokens.push(signCompact({ alg: 'HS256', kid: issuer.kid }, issuer.claims(), secret))
    }
  }
  for (const none of ['none', 'None', 'NONE', 'nOnE']) {
    const unsigned = signCompact({ alg: none }, issuer.claims(), undefined)
    tokens.push(unsigned, `${unsigned}${Buffer.from('sig').toString('base64url')}`)
  }
  const attacker = generateTestKeyPair('ES256')
  const attackerJwk = { ...attacker.publicJwk, alg: 'ES256' }
  for (const extra of [
    { kid: issuer.kid, jwk: attackerJwk },
    { jwk: attackerJwk },
    { kid: 'attacker', jwk: { ...attackerJwk, kid: 'attacker' } },
    { kid: issuer.kid, jku: 'http://127.0.0.1:1/jwks.json' },
    { kid: issuer.kid, x5u: 'http://127.0.0.1:1/cert.pem' },
    {
      kid: issuer.kid,
      x5c: [
        createPublicKey(generateTestKeyPair('ES256').publicPem)
          .export({ format: 'der', type: 'spki' })
          .toString('base64'),
      ],
    },
  ]) {
    tokens.push(signCompact({ alg: 'ES256', ...extra }, issuer.claims(), attacker.privateKey))
  }
  // The issuer's own key, with header parameters it must not be able to smuggle in.
  for (const extra of [
    { crit: ['urn:example:must'], 'urn:example:must': 1 },
    { crit: ['b64'], b64: true },
    { crit: ['b64'] },
    { crit: [] },
    { crit: 'b64', b64: true },
    { b64: false, crit: ['b64'] },
    { b64: false },
    { b64: true },
    { jku: 'http://127.0.0.1:1/jwks.json' },
    { typ: 'JWT', cty: 'x' },
  ]) {
    tokens.push(await sign({}, extra))
  }
  const rawHeader = encode({ alg, kid: issuer.kid, b64: false, crit: ['b64'] })
  const rawPayload = JSON.stringify(issuer.claims())
  tokens.push(
    `${rawHeader}.${rawPayload}.${signInput(`${rawHeader}.${rawPayload}`, issuer.privateKey, alg)}`,
  )
  tokens.push(`${encode({ alg: 'dir', enc: 'A256GCM' })}..aXY.Y2lwaGVy.dGFn`)
  tokens.push('', 'a', 'a.b', 'a.b.c', '..', 'e30.e30.', 'W10.e30.x', 'e30.W10.x', '%%%.%%%.%%%')
  return tokens
}

const BASE64URL_CHARS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'

/** A mutation of a valid token: what an attacker (or a broken client) might send. */
function mutation(issuer: TestIssuer, others: readonly TestIssuer[]) {
  const valid = issuer.claims()
  const base = signCompact({ alg: issuer.alg, kid: issuer.kid }, valid, issuer.privateKey)
  const flip = fc
    .tuple(fc.nat({ max: base.length - 1 }), fc.constantFrom(...BASE64URL_CHARS, '=', '.', ' '))
    .map(([at, char]) => base.slice(0, at) + char + base.slice(at + 1))
  const swap = fc.constantFrom(0, 1, 2).chain((a) =>
    fc.constantFrom(0, 1, 2).map((b) => {
      const parts = base.split('.')
      const x = parts[a] as string
      parts[a] = parts[b] as string
      parts[b] = x
      return parts.join('.')
    }),
  )
  const headerEdit = fc
    .record({
      alg: fc.constantFrom(issuer.alg, 'RS256', 'ES256', 'HS256', 'EdDSA', 'PS256', 'none', ''),
      kid: fc.option(fc.constantFrom(issuer.kid, 'other', 5), { nil: undefined }),
      extra: fc.dictionary(
        fc.constantFrom('crit', 'b64', 'jku', 'jwk', 'typ', 'zip', 'x5c'),
        fc.oneof(fc.jsonValue(), fc.constant(['b64']), fc.boolean()),
      ),
    })
    .map(({ alg, kid, extra }) => {
      const header = JSON.parse(JSON.stringify({ ...extra, alg, kid }))
      return signCompact(header, valid, issuer.privateKey, issuer.alg)
    })
  const payloadEdit = fc
    .record({
      claims: fc.dictionary(
        fc.constantFrom('iss', 'aud', 'exp', 'nbf', 'iat', 'sub', 'jti', 'tenant_id', 'scope'),
        fc.oneof(
          fc.jsonValue(),
          fc.integer({ min: NOW_SEC - 200_000, max: NOW_SEC + 200_000 }),
          fc.constantFrom(issuer.config.issuer, TEST_AUDIENCE, [TEST_AUDIENCE], null),
        ),
      ),
      drop: fc.subarray(['iss', 'aud', 'exp', 'nbf', 'iat', 'sub']),
      resign: fc.boolean(),
    })
    .map(({ claims, drop, resign }) => {
      const payload: Record<string, unknown> = { ...valid, ...claims }
      for (const name of drop) delete payload[name]
      if (resign)
        return signCompact({ alg: issuer.alg, kid: issuer.kid }, payload, issuer.privateKey)
      const [h, , s] = base.split('.')
      return `${h}.${encode(payload)}.${s}`
    })
  const wrongKey = fc
    .constantFrom(...others)
    .map((other) => signCompact({ alg: other.alg, kid: issuer.kid }, valid, other.privateKey))
  const wrongAlg = fc
    .constantFrom(...others)
    .map((other) =>
      signCompact({ alg: issuer.alg, kid: issuer.kid }, valid, other.privateKey, other.alg),
    )
  const padded = fc.constantFrom('=', '==', ' ').map((suffix) => `${base}${suffix}`)
  return fc.oneof(flip, swap, headerEdit, payloadEdit, wrongKey, wrongAlg, padded)
}

describe('the node:crypto verifier agrees with jose jwtVerify', () => {
  for (const alg of ALGORITHMS) {
    test(`${alg}: every token of the JWT test table`, async () => {
      for (const keySource of alg.startsWith('HS')
        ? ['jwks' as const]
        : (['jwks', 'pem'] as const)) {
        const { issuer, compare } = harness(alg, keySource)
        const differences = new Set<string>()
        for (const token of await tableTokens(issuer)) {
          const difference = await compare(token)
          if (difference) differences.add(difference)
        }
        // The b64-outside-crit token is in the table: the only expected difference there.
        assert.deepEqual([...differences], ['b64'])
      }
    })
  }

  const others = ALGORITHMS.map((alg) => createTestIssuer({ alg, clock: createManualClock() }))
  for (const alg of ALGORITHMS) {
    test(`${alg}: generated mutations (bit flips, swaps, header/payload edits, wrong keys)`, async () => {
      const { issuer, compare } = harness(alg)
      let accepted = 0
      let encoding = 0
      await fc.assert(
        fc.asyncProperty(mutation(issuer, others), async (token) => {
          const difference = await compare(token)
          if (difference === 'encoding') encoding++
        }),
        { numRuns: 400 },
      )
      // Sanity: the corpus is not all garbage, and the encoding difference is exercised.
      for (const token of [await issuer.sign(), await issuer.sign({ aud: [TEST_AUDIENCE] })]) {
        assert.equal(await compare(token), undefined)
        accepted++
      }
      assert.ok(accepted > 0)
      assert.ok(encoding > 0, 'no non-canonical encoding was generated')
    })
  }
})
