import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto'
import { describe, test } from 'node:test'
import fc from 'fast-check'
import { SignJWT } from 'jose'
import type { AuthFailure } from '../../src/core/failure.ts'
import type { IssuerConfig } from '../../src/core/issuer.ts'
import { createJwtVerifier, type JwtVerifierOptions } from '../../src/core/jwt.ts'
import type { JwtOutcome, VerifiedJwt } from '../../src/core/ports.ts'
import {
  createManualClock,
  createTestIssuer,
  generateTestKeyPair,
  signCompact,
  signInput,
  startKeyServer,
  TEST_AUDIENCE,
  TEST_EPOCH_MS,
  TEST_ISSUER,
  TEST_SUBJECT,
  TEST_TENANT,
  type TestAlgorithm,
  type TestIssuerOptions,
} from '../helpers/jwt.ts'

const NOW_SEC = TEST_EPOCH_MS / 1000

/** An issuer and a verifier trusting it, both on one manual clock. */
function setup(issuerOptions: TestIssuerOptions = {}, options: JwtVerifierOptions = {}) {
  const clock = createManualClock()
  const issuer = createTestIssuer({ clock, ...issuerOptions })
  const verifier = createJwtVerifier([issuer.config], { clock, ...options })
  return { clock, issuer, verifier }
}

function failureOf(outcome: JwtOutcome): AuthFailure {
  assert.equal(outcome.ok, false, 'expected the token to be refused')
  return (outcome as { failure: AuthFailure }).failure
}

function jwtOf(outcome: JwtOutcome): VerifiedJwt {
  if (!outcome.ok) assert.fail(`expected success, got ${JSON.stringify(outcome.failure)}`)
  return outcome.jwt
}

function assertInvalid(outcome: JwtOutcome, reason: string) {
  const failure = failureOf(outcome)
  assert.equal(failure.code, 'invalid_token')
  assert.equal((failure as { reason: string }).reason, reason)
}

const ASYMMETRIC: TestAlgorithm[] = ['RS256', 'PS256', 'ES256', 'EdDSA']
const NONE_SPELLINGS = ['none', 'None', 'NONE', 'nOnE']

describe('valid tokens', () => {
  for (const alg of ASYMMETRIC) {
    for (const keySource of ['jwks', 'pem'] as const) {
      test(`a valid ${alg} token verifies against a ${keySource} key`, async () => {
        const { issuer, verifier } = setup({ alg, keySource })
        const token = await issuer.sign({ jti: 'token-1' })
        assert.deepEqual(jwtOf(await verifier.verify(token)), {
          issuer: TEST_ISSUER,
          subject: TEST_SUBJECT,
          tenantId: TEST_TENANT,
          permissions: ['tokens:read'],
          tokenId: 'token-1',
          expiresAt: (NOW_SEC + 300) * 1000,
          keyId: issuer.kid,
          issuedAt: NOW_SEC * 1000,
          sessionId: undefined,
        })
      })
    }
  }

  for (const alg of ['HS256', 'HS384', 'HS512'] as const) {
    test(`a valid ${alg} token verifies with the configured secret`, async () => {
      const { issuer, verifier } = setup({ alg })
      const jwt = jwtOf(await verifier.verify(await issuer.sign()))
      assert.equal(jwt.subject, TEST_SUBJECT)
      assert.equal(jwt.keyId, undefined)
    })
  }

  test('a token signed by jose SignJWT verifies (the helper signs like a real issuer)', async () => {
    const { issuer, verifier } = setup({ alg: 'RS256' })
    const token = await new SignJWT(issuer.claims())
      .setProtectedHeader({ alg: 'RS256', kid: issuer.kid })
      .sign(issuer.privateKey as KeyObject)
    assert.equal(jwtOf(await verifier.verify(token)).tenantId, TEST_TENANT)
  })

  test('a JWK without alg is bound by its curve: EC P-256 verifies ES256, Ed25519 verifies EdDSA', async () => {
    for (const alg of ['ES256', 'EdDSA'] as const) {
      const clock = createManualClock()
      const issuer = createTestIssuer({ alg, clock })
      const { alg: _omitted, ...jwk } = issuer.publicJwk ?? {}
      const config: IssuerConfig = {
        ...issuer.config,
        keySource: { kind: 'jwks', jwks: { keys: [jwk] } },
      }
      const verifier = createJwtVerifier([config], { clock })
      assert.equal(jwtOf(await verifier.verify(await issuer.sign())).keyId, issuer.kid)
    }
  })

  test('a token without kid verifies when the issuer has one key for its algorithm', async () => {
    const { issuer, verifier } = setup({ alg: 'ES256' })
    const jwt = jwtOf(await verifier.verify(await issuer.sign({}, { header: { kid: undefined } })))
    assert.equal(jwt.keyId, issuer.kid)
  })

  test('the audience may be an array naming one accepted audience', async () => {
    const { issuer, verifier } = setup()
    const token = await issuer.sign({ aud: ['other', TEST_AUDIENCE] })
    assert.equal(jwtOf(await verifier.verify(token)).subject, TEST_SUBJECT)
  })

  test('the right issuer is chosen among several by the token iss', async () => {
    const clock = createManualClock()
    const first = createTestIssuer({ clock, issuer: 'https://one.test', alg: 'ES256' })
    const second = createTestIssuer({ clock, issuer: 'https://two.test', alg: 'RS256' })
    const verifier = createJwtVerifier([first.config, second.config], { clock })
    assert.equal(jwtOf(await verifier.verify(await first.sign())).issuer, 'https://one.test')
    assert.equal(jwtOf(await verifier.verify(await second.sign())).issuer, 'https://two.test')
  })

  test('an issuer whose key this instance cannot read → 503 unavailable (the token may be fine); the others verify', async () => {
    const clock = createManualClock()
    const readable = createTestIssuer({ clock, issuer: 'https://one.test' })
    const sealed = createTestIssuer({ clock, issuer: 'https://sealed.test', alg: 'HS256' })
    const verifier = createJwtVerifier([readable.config], {
      clock,
      unreadableIssuers: ['https://sealed.test'],
    })
    assert.equal(failureOf(await verifier.verify(await sealed.sign())).code, 'unavailable')
    assert.equal(jwtOf(await verifier.verify(await readable.sign())).issuer, 'https://one.test')
  })
})

describe('time claims', () => {
  test('an expired token → token_expired', async () => {
    const { issuer, verifier } = setup()
    const token = await issuer.sign({ iat: NOW_SEC - 600, exp: NOW_SEC - 31 })
    assert.deepEqual(failureOf(await verifier.verify(token)), {
      code: 'token_expired',
      detail: 'the token has expired',
    })
  })

  test('expiry honours the clock tolerance exactly: exp = now - 29 passes, exp = now - 30 fails', async () => {
    const { issuer, verifier } = setup()
    const within = await issuer.sign({ iat: NOW_SEC - 600, exp: NOW_SEC - 29 })
    const beyond = await issuer.sign({ iat: NOW_SEC - 600, exp: NOW_SEC - 30 })
    assert.equal((await verifier.verify(within)).ok, true)
    assert.equal(failureOf(await verifier.verify(beyond)).code, 'token_expired')
  })

  test('nbf in the future beyond the tolerance → invalid_token not_yet_valid', async () => {
    const { issuer, verifier } = setup()
    assertInvalid(await verifier.verify(await issuer.sign({ nbf: NOW_SEC + 31 })), 'not_yet_valid')
    assert.equal((await verifier.verify(await issuer.sign({ nbf: NOW_SEC + 30 }))).ok, true)
  })

  test('iat in the future beyond the tolerance → invalid_token not_yet_valid', async () => {
    const { issuer, verifier } = setup()
    assertInvalid(await verifier.verify(await issuer.sign({ iat: NOW_SEC + 31 })), 'not_yet_valid')
    assert.equal((await verifier.verify(await issuer.sign({ iat: NOW_SEC + 30 }))).ok, true)
  })

  test('a token without exp → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    const failure = failureOf(await verifier.verify(await issuer.sign({ exp: undefined })))
    assert.deepEqual(failure, {
      code: 'invalid_token',
      reason: 'claims',
      detail: 'the "exp" claim is missing or invalid',
    })
  })

  test('a non-numeric exp → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    const token = await issuer.sign({ exp: String(NOW_SEC + 60) })
    assertInvalid(await verifier.verify(token), 'claims')
  })

  test('a lifetime (exp - iat) over the maximum → invalid_token lifetime_exceeded', async () => {
    const { issuer, verifier } = setup({}, { maxLifetimeSec: 3600 })
    const over = await issuer.sign({ iat: NOW_SEC - 10, exp: NOW_SEC + 3591 })
    const exact = await issuer.sign({ iat: NOW_SEC - 10, exp: NOW_SEC + 3590 })
    assertInvalid(await verifier.verify(over), 'lifetime_exceeded')
    assert.equal((await verifier.verify(exact)).ok, true)
  })

  test('without iat, the remaining lifetime (exp - now) over the maximum → lifetime_exceeded', async () => {
    const { issuer, verifier } = setup({}, { maxLifetimeSec: 3600 })
    const over = await issuer.sign({ iat: undefined, exp: NOW_SEC + 3601 })
    const exact = await issuer.sign({ iat: undefined, exp: NOW_SEC + 3600 })
    assertInvalid(await verifier.verify(over), 'lifetime_exceeded')
    assert.equal((await verifier.verify(exact)).ok, true)
  })

  test('the default maximum lifetime is 24 hours', async () => {
    const { issuer, verifier } = setup()
    assertInvalid(
      await verifier.verify(await issuer.sign({}, { expiresInSec: 86_401 })),
      'lifetime_exceeded',
    )
    assert.equal((await verifier.verify(await issuer.sign({}, { expiresInSec: 86_400 }))).ok, true)
  })

  test('time comes from the injected clock, not the system clock', async () => {
    const { clock, issuer, verifier } = setup({}, { cacheMaxEntries: 0 })
    const token = await issuer.sign()
    assert.equal((await verifier.verify(token)).ok, true)
    clock.advance(331_000)
    assert.equal(failureOf(await verifier.verify(token)).code, 'token_expired')
  })
})

describe('issuer, audience and subject', () => {
  test('an unknown iss → invalid_token unknown_issuer, without echoing the iss', async () => {
    const { issuer, verifier } = setup()
    const failure = failureOf(
      await verifier.verify(await issuer.sign({ iss: 'https://evil.test' })),
    )
    assert.deepEqual(failure, {
      code: 'invalid_token',
      reason: 'unknown_issuer',
      detail: 'the token issuer is not trusted',
    })
  })

  test('a token without iss → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    assertInvalid(await verifier.verify(await issuer.sign({ iss: undefined })), 'claims')
  })

  test('a wrong aud → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    const failure = failureOf(await verifier.verify(await issuer.sign({ aud: 'someone-else' })))
    assert.deepEqual(failure, {
      code: 'invalid_token',
      reason: 'claims',
      detail: 'the "aud" claim is missing or invalid',
    })
  })

  test('a token without aud → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    assertInvalid(await verifier.verify(await issuer.sign({ aud: undefined })), 'claims')
  })

  test('a token without sub, with an empty sub, or a non-string sub → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    for (const sub of [undefined, '', 42, ['user-1']]) {
      assertInvalid(await verifier.verify(await issuer.sign({ sub })), 'claims')
    }
  })

  test('a non-string jti → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    assertInvalid(await verifier.verify(await issuer.sign({ jti: 7 })), 'claims')
  })
})

describe('signatures and keys', () => {
  test('a tampered payload → invalid_token bad_signature', async () => {
    const { issuer, verifier } = setup()
    const [header, , signature] = (await issuer.sign()).split('.')
    const forged = Buffer.from(JSON.stringify(issuer.claims({ sub: 'admin' }))).toString(
      'base64url',
    )
    assertInvalid(await verifier.verify(`${header}.${forged}.${signature}`), 'bad_signature')
  })

  test('a signature from another key with the same kid → invalid_token bad_signature', async () => {
    for (const alg of [...ASYMMETRIC, 'HS256'] as const) {
      const { issuer, verifier } = setup({ alg })
      const impostor = createTestIssuer({ alg, kid: issuer.kid })
      assertInvalid(await verifier.verify(await impostor.sign()), 'bad_signature')
    }
  })

  test('an unknown kid → invalid_token unknown_key', async () => {
    const { issuer, verifier } = setup()
    const token = await issuer.sign({}, { header: { kid: 'not-a-known-key' } })
    assert.deepEqual(failureOf(await verifier.verify(token)), {
      code: 'invalid_token',
      reason: 'unknown_key',
      detail: 'the signing key is not known',
    })
  })

  test('a non-string kid → invalid_token malformed', async () => {
    const { issuer, verifier } = setup()
    assertInvalid(await verifier.verify(await issuer.sign({}, { header: { kid: 1 } })), 'malformed')
  })

  test('an RS256 key presented a PS256 token signed by the same private key → algorithm_not_allowed', async () => {
    for (const keySource of ['jwks', 'pem'] as const) {
      const { issuer, verifier } = setup({ alg: 'RS256', keySource })
      const token = signCompact(
        { alg: 'PS256', kid: issuer.kid },
        issuer.claims(),
        issuer.privateKey,
      )
      assertInvalid(await verifier.verify(token), 'algorithm_not_allowed')
    }
  })

  test('an RS256 key presented an RS512 token → algorithm_not_allowed, even when RS512 is allowed', async () => {
    for (const algorithms of [undefined, ['RS256', 'RS512']]) {
      const { issuer, verifier } = setup({ alg: 'RS256', algorithms })
      const token = signCompact(
        { alg: 'RS512', kid: issuer.kid },
        issuer.claims(),
        issuer.privateKey,
      )
      assertInvalid(await verifier.verify(token), 'algorithm_not_allowed')
    }
  })

  test('an algorithm outside the issuer allowlist → algorithm_not_allowed before any key lookup', async () => {
    const issuer = createTestIssuer({ alg: 'ES256' })
    const server = await startKeyServer({ keys: [issuer.publicJwk] })
    try {
      const config: IssuerConfig = {
        ...issuer.config,
        algorithms: ['RS256'],
        keySource: { kind: 'jwks_url', url: server.url },
      }
      const verifier = createJwtVerifier([config])
      assertInvalid(await verifier.verify(await issuer.sign()), 'algorithm_not_allowed')
      assert.equal(server.requests, 0)
    } finally {
      await server.close()
    }
  })

  test('with no kid and several keys for the algorithm, the token is refused as unknown_key', async () => {
    const clock = createManualClock()
    const a = createTestIssuer({ clock, kid: 'a' })
    const b = createTestIssuer({ clock, kid: 'b' })
    const config: IssuerConfig = {
      ...a.config,
      keySource: { kind: 'jwks', jwks: { keys: [a.publicJwk ?? {}, b.publicJwk ?? {}] } },
    }
    const verifier = createJwtVerifier([config], { clock })
    assertInvalid(
      await verifier.verify(await a.sign({}, { header: { kid: undefined } })),
      'unknown_key',
    )
    assert.equal((await verifier.verify(await b.sign())).ok, true)
  })
})

describe('alg none and algorithm confusion', () => {
  test('alg none in every spelling, with or without a signature, is refused for every key source', async () => {
    for (const alg of ['ES256', 'HS256'] as const) {
      const { issuer, verifier } = setup({ alg })
      for (const none of NONE_SPELLINGS) {
        const unsigned = signCompact({ alg: none }, issuer.claims(), undefined)
        const withSignature = `${unsigned}${Buffer.from('sig').toString('base64url')}`
        for (const token of [unsigned, withSignature]) {
          assert.deepEqual(failureOf(await verifier.verify(token)), {
            code: 'invalid_token',
            reason: 'algorithm_not_allowed',
            detail: 'unsigned tokens are not accepted',
          })
        }
      }
    }
  })

  test('none can never be configured as an allowed algorithm', () => {
    const issuer = createTestIssuer()
    for (const none of NONE_SPELLINGS) {
      assert.throws(
        () => createJwtVerifier([{ ...issuer.config, algorithms: ['ES256', none] }]),
        /none/,
      )
    }
  })

  test('HS256 signed with the issuer RSA public key (PEM or JWK bytes) → algorithm_not_allowed', async () => {
    for (const keySource of ['pem', 'jwks'] as const) {
      const { issuer, verifier } = setup({ alg: 'RS256', keySource })
      const secrets = [
        Buffer.from(issuer.publicPem ?? ''),
        Buffer.from(JSON.stringify(issuer.publicJwk)),
        issuer.publicKey?.export({ format: 'der', type: 'spki' }) ?? Buffer.alloc(0),
      ]
      for (const secret of secrets) {
        const token = signCompact({ alg: 'HS256', kid: issuer.kid }, issuer.claims(), secret)
        assertInvalid(await verifier.verify(token), 'algorithm_not_allowed')
      }
    }
  })

  test('HS256 signed with the issuer EC public key → algorithm_not_allowed', async () => {
    const { issuer, verifier } = setup({ alg: 'ES256', keySource: 'pem' })
    const token = signCompact(
      { alg: 'HS256' },
      issuer.claims(),
      Buffer.from(issuer.publicPem ?? ''),
    )
    assertInvalid(await verifier.verify(token), 'algorithm_not_allowed')
  })

  test('HS* cannot be allowed for a public-key source, and a secret verifies only HS*', () => {
    const rsa = createTestIssuer({ alg: 'RS256', keySource: 'pem' })
    assert.throws(
      () => createJwtVerifier([{ ...rsa.config, algorithms: ['RS256', 'HS256'] }]),
      /HS256 needs a "secret" key source/,
    )
    const hmac = createTestIssuer({ alg: 'HS256' })
    assert.throws(
      () => createJwtVerifier([{ ...hmac.config, algorithms: ['HS256', 'RS256'] }]),
      /a secret cannot verify RS256/,
    )
  })

  test('a JWKS may not carry symmetric or private keys, nor a key no allowed algorithm fits', () => {
    const issuer = createTestIssuer({ alg: 'RS256' })
    const pair = generateTestKeyPair('RS256')
    const bad: [Record<string, unknown>, string[] | undefined][] = [
      [{ kty: 'oct', k: Buffer.alloc(32, 1).toString('base64url'), alg: 'HS256' }, undefined],
      [{ ...(pair.privateKey.export({ format: 'jwk' }) as object), alg: 'RS256' }, undefined],
      [{ ...pair.publicJwk }, ['ES256', 'EdDSA']],
      [{ ...pair.publicJwk, alg: 'RS512' }, undefined],
      [{ ...pair.publicJwk, alg: 'ES256' }, undefined],
      [{ ...pair.publicJwk, alg: 'RS256', use: 'enc' }, undefined],
    ]
    for (const [jwk, algorithms] of bad) {
      const config: IssuerConfig = {
        ...issuer.config,
        keySource: { kind: 'jwks', jwks: { keys: [jwk] } },
        algorithms,
      }
      assert.throws(() => createJwtVerifier([config]), /JWKS key 0/)
    }
  })

  test('a shared secret must be base64url and at least as long as the hash', () => {
    const base = { issuer: TEST_ISSUER, audiences: [TEST_AUDIENCE] }
    const short = Buffer.alloc(31, 7).toString('base64url')
    assert.throws(
      () =>
        createJwtVerifier([
          { ...base, keySource: { kind: 'secret', secret: short, algorithm: 'HS256' } },
        ]),
      /at least 32 bytes/,
    )
    assert.throws(
      () =>
        createJwtVerifier([
          {
            ...base,
            keySource: { kind: 'secret', secret: 'not base64url!'.repeat(4), algorithm: 'HS256' },
          },
        ]),
      /base64url/,
    )
  })

  test('RSA keys shorter than 2048 bits are refused at configuration', () => {
    const issuer = createTestIssuer({ alg: 'RS256' })
    const small = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey
    const pem = small.export({ format: 'pem', type: 'spki' }).toString()
    const config: IssuerConfig = {
      ...issuer.config,
      keySource: { kind: 'pem', pem, algorithm: 'RS256' },
    }
    assert.throws(() => createJwtVerifier([config]), /2048/)
  })
})

describe('JOSE header parameters are never trusted', () => {
  test('a token carrying its own jwk, signed with that embedded key, is refused', async () => {
    const { issuer, verifier } = setup()
    const attacker = generateTestKeyPair('ES256')
    const attackerJwk = { ...attacker.publicJwk, alg: 'ES256' }
    const payload = issuer.claims({ sub: 'admin' })
    const cases: [Record<string, unknown>, string][] = [
      [{ alg: 'ES256', kid: issuer.kid, jwk: attackerJwk }, 'bad_signature'],
      [{ alg: 'ES256', jwk: attackerJwk }, 'bad_signature'],
      [{ alg: 'ES256', kid: 'attacker', jwk: { ...attackerJwk, kid: 'attacker' } }, 'unknown_key'],
    ]
    for (const [header, reason] of cases) {
      assertInvalid(
        await verifier.verify(signCompact(header, payload, attacker.privateKey)),
        reason,
      )
    }
  })

  test('jku and x5u pointing to a local server are never requested', async () => {
    const { issuer, verifier } = setup()
    const attacker = generateTestKeyPair('ES256')
    const server = await startKeyServer({
      keys: [{ ...attacker.publicJwk, kid: 'evil', alg: 'ES256' }],
    })
    try {
      for (const parameter of ['jku', 'x5u']) {
        for (const kid of [issuer.kid, 'evil', undefined]) {
          const header = JSON.parse(JSON.stringify({ alg: 'ES256', kid, [parameter]: server.url }))
          const outcome = await verifier.verify(
            signCompact(header, issuer.claims(), attacker.privateKey),
          )
          assert.equal(outcome.ok, false)
        }
      }
      assert.equal(server.requests, 0)
    } finally {
      await server.close()
    }
  })

  test('an x5c chain in the header is not used as a key', async () => {
    const { issuer, verifier } = setup()
    const attacker = generateTestKeyPair('ES256')
    const der = createPublicKey(attacker.publicPem).export({ format: 'der', type: 'spki' })
    const header = { alg: 'ES256', kid: issuer.kid, x5c: [der.toString('base64')] }
    assertInvalid(
      await verifier.verify(signCompact(header, issuer.claims(), attacker.privateKey)),
      'bad_signature',
    )
  })

  test('an unknown crit parameter → invalid_token malformed, even when correctly signed', async () => {
    const { issuer, verifier } = setup()
    const token = await issuer.sign(
      {},
      { header: { crit: ['urn:example:must'], 'urn:example:must': 1 } },
    )
    assert.deepEqual(failureOf(await verifier.verify(token)), {
      code: 'invalid_token',
      reason: 'malformed',
      detail: 'the token uses an unsupported JOSE feature',
    })
  })

  test('b64: false (RFC 7797 unencoded payload) is refused, with or without crit', async () => {
    const { issuer, verifier } = setup()
    for (const extra of [{ b64: false, crit: ['b64'] }, { b64: false }]) {
      const header = Buffer.from(
        JSON.stringify({ alg: 'ES256', kid: issuer.kid, ...extra }),
      ).toString('base64url')
      const payload = JSON.stringify(issuer.claims())
      const unencoded = `${header}.${payload}.${signInput(`${header}.${payload}`, issuer.privateKey, 'ES256')}`
      assertInvalid(await verifier.verify(unencoded), 'malformed')
      const encoded = await issuer.sign({}, { header: extra })
      assertInvalid(await verifier.verify(encoded), 'malformed')
    }
  })
})

describe('token shape', () => {
  test('a JWE-shaped token (five segments) → invalid_token malformed', async () => {
    const { verifier } = setup()
    const header = Buffer.from(JSON.stringify({ alg: 'dir', enc: 'A256GCM' })).toString('base64url')
    assert.deepEqual(failureOf(await verifier.verify(`${header}..aXY.Y2lwaGVy.dGFn`)), {
      code: 'invalid_token',
      reason: 'malformed',
      detail: 'encrypted tokens (JWE) are not accepted',
    })
  })

  test('an oversized token → invalid_token malformed; a large token under the bound verifies', async () => {
    const { issuer, verifier } = setup({}, { maxTokenLength: 2048 })
    const small = await issuer.sign({ pad: 'x'.repeat(1200) })
    assert.ok(small.length < 2048)
    assert.equal((await verifier.verify(small)).ok, true)
    const large = await issuer.sign({ pad: 'x'.repeat(1600) })
    assert.ok(large.length > 2048)
    assertInvalid(await verifier.verify(large), 'malformed')
  })

  test('the default size bound is 8192 characters', async () => {
    const { issuer, verifier } = setup()
    assertInvalid(await verifier.verify(await issuer.sign({ pad: 'x'.repeat(8192) })), 'malformed')
    assertInvalid(await verifier.verify('a'.repeat(8193)), 'malformed')
  })

  test('garbage is refused as malformed, never thrown', async () => {
    const { verifier } = setup()
    for (const token of [
      '',
      'a',
      'a.b',
      'a.b.c',
      '..',
      'e30.e30.',
      'W10.e30.x',
      'e30.W10.x',
      '%%%.%%%.%%%',
    ]) {
      assertInvalid(await verifier.verify(token), 'malformed')
    }
  })

  test('any string (or three segments of anything) yields an invalid_token failure, never a throw', async () => {
    const { issuer, verifier } = setup()
    const segment = fc.oneof(
      fc.string(),
      fc.base64String(),
      fc.json().map((json) => Buffer.from(json).toString('base64url')),
    )
    const header = fc.record({
      alg: fc.constantFrom('ES256', 'RS256', 'HS256', 'none', 'EdDSA', 1, null),
      kid: fc.option(fc.constantFrom(issuer.kid, 'x', 3)),
      crit: fc.option(fc.array(fc.string())),
      b64: fc.option(fc.boolean()),
    })
    const structured = fc
      .tuple(header, fc.dictionary(fc.string(), fc.jsonValue()), segment)
      .map(([h, p, s]) => {
        const encode = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url')
        return `${encode(h)}.${encode({ ...issuer.claims(), ...p })}.${s}`
      })
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string(),
          structured,
          fc.array(segment).map((s) => s.join('.')),
        ),
        async (token) => {
          const outcome = await verifier.verify(token)
          if (outcome.ok) assert.fail('garbage verified')
          assert.ok(['invalid_token', 'token_expired'].includes(outcome.failure.code))
          assert.equal(JSON.stringify(outcome.failure).includes(token) && token.length > 12, false)
        },
      ),
      { numRuns: 300 },
    )
  })

  test('failure details never contain the token', async () => {
    const { issuer, verifier } = setup()
    const tokens = [
      await issuer.sign({ exp: NOW_SEC - 100, iat: NOW_SEC - 200 }),
      await issuer.sign({ aud: 'x' }),
      await issuer.sign({ iss: 'https://evil.test' }),
      await issuer.sign({}, { header: { kid: 'nope' } }),
    ]
    for (const token of tokens) {
      const text = JSON.stringify(failureOf(await verifier.verify(token)))
      for (const part of token.split('.')) assert.equal(text.includes(part), false)
    }
  })
})

describe('tenant', () => {
  test('a missing, empty or non-string tenant claim → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    for (const tenant_id of [undefined, '', 12, ['tenant-a'], { id: 'tenant-a' }]) {
      const failure = failureOf(await verifier.verify(await issuer.sign({ tenant_id })))
      assert.deepEqual(failure, {
        code: 'invalid_token',
        reason: 'claims',
        detail: 'the tenant claim must be a non-empty string',
      })
    }
  })

  test('a configured tenant claim name is read', async () => {
    const { issuer, verifier } = setup({ tenantClaim: 'org' })
    assert.equal(jwtOf(await verifier.verify(await issuer.sign({ org: 'acme' }))).tenantId, 'acme')
    assertInvalid(
      await verifier.verify(await issuer.sign({ org: undefined, tenant_id: 'acme' })),
      'claims',
    )
  })

  test('a fixed-tenant issuer assigns its tenant whatever the token says', async () => {
    const { issuer, verifier } = setup({ fixed: 'tenant-fixed' })
    assert.equal(
      jwtOf(await verifier.verify(await issuer.sign({ tenant_id: undefined }))).tenantId,
      'tenant-fixed',
    )
    assert.equal(
      jwtOf(await verifier.verify(await issuer.sign({ tenant_id: 'other' }))).tenantId,
      'tenant-fixed',
    )
  })
})

describe('permissions', () => {
  test('a permissions array is read as is', async () => {
    const { issuer, verifier } = setup()
    const jwt = jwtOf(
      await verifier.verify(await issuer.sign({ permissions: ['a:read', 'b:write'] })),
    )
    assert.deepEqual(jwt.permissions, ['a:read', 'b:write'])
    assert.ok(Object.isFrozen(jwt.permissions))
  })

  test('a scope string is split on spaces', async () => {
    const { issuer, verifier } = setup({ permissionsClaim: 'scope' })
    const jwt = jwtOf(
      await verifier.verify(await issuer.sign({ scope: 'tokens:read  audit:read ' })),
    )
    assert.deepEqual(jwt.permissions, ['tokens:read', 'audit:read'])
  })

  test('a string-valued permissions claim of any name is split on spaces', async () => {
    const { issuer, verifier } = setup({ permissionsClaim: 'scp' })
    assert.deepEqual(jwtOf(await verifier.verify(await issuer.sign({ scp: 'a b' }))).permissions, [
      'a',
      'b',
    ])
  })

  test('a missing permissions claim means no permissions', async () => {
    const { issuer, verifier } = setup()
    assert.deepEqual(
      jwtOf(await verifier.verify(await issuer.sign({ permissions: undefined }))).permissions,
      [],
    )
  })

  test('a permissions claim of the wrong type → invalid_token claims', async () => {
    const { issuer, verifier } = setup()
    for (const permissions of [42, true, { a: 1 }, ['ok', 3], [''], [null], null]) {
      assertInvalid(await verifier.verify(await issuer.sign({ permissions })), 'claims')
    }
  })
})

describe('verified-token cache', () => {
  test('a repeated token is served from the cache (the same frozen object)', async () => {
    const { issuer, verifier } = setup()
    const token = await issuer.sign()
    const first = jwtOf(await verifier.verify(token))
    const second = jwtOf(await verifier.verify(token))
    assert.equal(second, first)
    assert.ok(Object.isFrozen(first))
  })

  test('with the cache disabled, every verification builds a new result', async () => {
    const { issuer, verifier } = setup({}, { cacheMaxEntries: 0 })
    const token = await issuer.sign()
    assert.notEqual(jwtOf(await verifier.verify(token)), jwtOf(await verifier.verify(token)))
  })

  test('a cached token is rejected after its exp exactly as the uncached path rejects it', async () => {
    const { clock, issuer, verifier } = setup()
    const token = await issuer.sign({}, { expiresInSec: 60 })
    const cached = jwtOf(await verifier.verify(token))
    clock.set(TEST_EPOCH_MS + (60 + 29) * 1000 + 999)
    assert.equal(jwtOf(await verifier.verify(token)), cached)
    clock.set(TEST_EPOCH_MS + (60 + 30) * 1000)
    const fromCache = failureOf(await verifier.verify(token))
    const fresh = createJwtVerifier([issuer.config], { clock })
    assert.deepEqual(fromCache, failureOf(await fresh.verify(token)))
    assert.equal(fromCache.code, 'token_expired')
  })

  test('failures are not cached: a token refused as not yet valid passes once its nbf arrives', async () => {
    const { clock, issuer, verifier } = setup()
    const token = await issuer.sign({ nbf: NOW_SEC + 120 })
    assertInvalid(await verifier.verify(token), 'not_yet_valid')
    clock.advance(91_000)
    assert.equal((await verifier.verify(token)).ok, true)
  })

  test('a cached token is not served if the clock moves back before its nbf', async () => {
    const { clock, issuer, verifier } = setup()
    const token = await issuer.sign({ nbf: NOW_SEC })
    assert.equal((await verifier.verify(token)).ok, true)
    clock.set(TEST_EPOCH_MS - 31_000)
    assertInvalid(await verifier.verify(token), 'not_yet_valid')
  })

  test('the cache is bounded: with room for 2 tokens, the oldest of 3 is verified afresh', async () => {
    const { issuer, verifier } = setup({}, { cacheMaxEntries: 2 })
    const [t1, t2, t3] = await Promise.all([1, 2, 3].map((n) => issuer.sign({ jti: `t${n}` })))
    const a1 = jwtOf(await verifier.verify(t1 as string))
    jwtOf(await verifier.verify(t2 as string))
    const a3 = jwtOf(await verifier.verify(t3 as string))
    assert.equal(jwtOf(await verifier.verify(t3 as string)), a3)
    const b1 = jwtOf(await verifier.verify(t1 as string))
    assert.notEqual(b1, a1)
    assert.deepEqual(b1, a1)
  })

  test('close() drops the cache', async () => {
    const { issuer, verifier } = setup()
    const token = await issuer.sign()
    const first = jwtOf(await verifier.verify(token))
    verifier.close()
    assert.notEqual(jwtOf(await verifier.verify(token)), first)
  })
})

describe('configuration', () => {
  test('an issuer configured twice, or without audiences, is refused', () => {
    const issuer = createTestIssuer()
    assert.throws(() => createJwtVerifier([issuer.config, issuer.config]), /configured twice/)
    assert.throws(() => createJwtVerifier([{ ...issuer.config, audiences: [] }]), /audiences/)
  })

  test('a PEM whose algorithm is not on the allowlist is refused', () => {
    const issuer = createTestIssuer({ alg: 'RS256', keySource: 'pem' })
    assert.throws(
      () => createJwtVerifier([{ ...issuer.config, algorithms: ['ES256'] }]),
      /RS256 is not in/,
    )
  })

  test('a PEM whose key type does not fit its algorithm is refused', () => {
    const issuer = createTestIssuer({ alg: 'ES256', keySource: 'pem' })
    const config: IssuerConfig = {
      ...issuer.config,
      keySource: { kind: 'pem', pem: issuer.publicPem ?? '', algorithm: 'RS256' },
      algorithms: ['RS256'],
    }
    assert.throws(() => createJwtVerifier([config]), /cannot be used with RS256/)
  })

  test('an undefined option falls back to its default', async () => {
    const { issuer, verifier } = setup(
      {},
      { jwks: { timeoutMs: undefined }, clockToleranceSec: undefined },
    )
    assert.equal(
      (await verifier.verify(await issuer.sign({ exp: NOW_SEC - 29, iat: NOW_SEC - 60 }))).ok,
      true,
    )
  })

  test('negative durations are refused', () => {
    assert.throws(() => createJwtVerifier([], { clockToleranceSec: -1 }), RangeError)
    assert.throws(() => createJwtVerifier([], { jwks: { timeoutMs: Number.NaN } }), RangeError)
  })

  test('a verifier with no issuers refuses every token as unknown_issuer', async () => {
    const issuer = createTestIssuer()
    const verifier = createJwtVerifier([])
    assertInvalid(await verifier.verify(await issuer.sign()), 'unknown_issuer')
  })
})
