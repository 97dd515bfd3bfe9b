import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, test } from 'node:test'
import type { AuthFailure } from '../../src/core/failure.ts'
import type { IssuerConfig } from '../../src/core/issuer.ts'
import { checkJwksUrl, createJwksPool, type SkippedKey } from '../../src/core/jwks.ts'
import { createJwtVerifier, type JwtVerifierOptions } from '../../src/core/jwt.ts'
import type { JwtOutcome, JwtVerifier } from '../../src/core/ports.ts'
import {
  createManualClock,
  createTestIssuer,
  generateTestKeyPair,
  type KeyServer,
  type ManualClock,
  signCompact,
  startKeyServer,
  type TestIssuer,
} from '../helpers/jwt.ts'

const cleanups: (() => unknown)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

interface Remote {
  readonly clock: ManualClock
  readonly server: KeyServer
  readonly issuer: TestIssuer
  readonly verifier: JwtVerifier
}

/** An issuer whose public key is served by a local JWKS server, and a verifier fetching it. */
async function remote(options: JwtVerifierOptions = {}): Promise<Remote> {
  const clock = createManualClock()
  const issuer = createTestIssuer({ clock, kid: 'key-1' })
  const server = await startKeyServer({ keys: [issuer.publicJwk] })
  const config: IssuerConfig = {
    ...issuer.config,
    keySource: { kind: 'jwks_url', url: server.url },
  }
  const verifier = createJwtVerifier([config], { clock, ...options })
  cleanups.push(
    () => server.close(),
    () => verifier.close(),
  )
  return { clock, server, issuer, verifier }
}

function failureOf(outcome: JwtOutcome): AuthFailure {
  assert.equal(outcome.ok, false, 'expected the token to be refused')
  return (outcome as { failure: AuthFailure }).failure
}

function assertOk(outcome: JwtOutcome) {
  if (!outcome.ok) assert.fail(`expected success, got ${JSON.stringify(outcome.failure)}`)
}

/** A second key for the same issuer, signing with kid `kid`. */
function rotatedKey(issuer: TestIssuer, kid: string) {
  const next = createTestIssuer({ alg: issuer.alg, kid })
  return { jwk: next.publicJwk, sign: (claims = {}) => next.sign(issuer.claims(claims)) }
}

describe('remote JWKS', () => {
  test('keys are fetched once and cached across tokens', async () => {
    const { server, issuer, verifier } = await remote()
    for (const jti of ['a', 'b', 'c']) assertOk(await verifier.verify(await issuer.sign({ jti })))
    assert.equal(server.requests, 1)
  })

  test('concurrent first verifications share one JWKS request', async () => {
    const { server, issuer, verifier } = await remote()
    const tokens = await Promise.all([1, 2, 3, 4, 5].map((n) => issuer.sign({ jti: `t${n}` })))
    const outcomes = await Promise.all(tokens.map((token) => verifier.verify(token)))
    for (const outcome of outcomes) assertOk(outcome)
    assert.equal(server.requests, 1)
  })

  test('an unknown kid triggers one refetch, then the cooldown holds further refetches', async () => {
    const { clock, server, issuer, verifier } = await remote({ jwks: { cooldownMs: 30_000 } })
    assertOk(await verifier.verify(await issuer.sign()))
    assert.equal(server.requests, 1)
    clock.advance(30_000)
    const unknown = (kid: string) => issuer.sign({}, { header: { kid } })
    assert.equal(failureOf(await verifier.verify(await unknown('nope-1'))).code, 'invalid_token')
    assert.equal(server.requests, 2)
    const failure = failureOf(await verifier.verify(await unknown('nope-2')))
    assert.deepEqual(failure, {
      code: 'invalid_token',
      reason: 'unknown_key',
      detail: 'the signing key is not known',
    })
    clock.advance(29_999)
    failureOf(await verifier.verify(await unknown('nope-3')))
    assert.equal(server.requests, 2)
    clock.advance(1)
    failureOf(await verifier.verify(await unknown('nope-4')))
    assert.equal(server.requests, 3)
  })

  test('a rotated key (new kid published) is picked up on the first token that uses it', async () => {
    const { clock, server, issuer, verifier } = await remote()
    assertOk(await verifier.verify(await issuer.sign()))
    const next = rotatedKey(issuer, 'key-2')
    server.setJwks({ keys: [issuer.publicJwk, next.jwk] })
    clock.advance(30_000)
    assertOk(await verifier.verify(await next.sign()))
    assert.equal(server.requests, 2)
    assertOk(await verifier.verify(await next.sign({ jti: 'again' })))
    assertOk(await verifier.verify(await issuer.sign({ jti: 'old key' })))
    assert.equal(server.requests, 2)
  })

  test('a removed key stops verifying once the cache max age has passed', async () => {
    const { clock, server, issuer, verifier } = await remote({ jwks: { cacheMaxAgeMs: 60_000 } })
    assertOk(await verifier.verify(await issuer.sign({ jti: '1' })))
    const next = rotatedKey(issuer, 'key-2')
    server.setJwks({ keys: [next.jwk] })
    clock.advance(59_000)
    assertOk(await verifier.verify(await issuer.sign({ jti: '2' })))
    assert.equal(server.requests, 1)
    clock.advance(1000)
    assert.equal(
      failureOf(await verifier.verify(await issuer.sign({ jti: '3' }))).code,
      'invalid_token',
    )
    assert.equal(server.requests, 2)
  })

  test('server down with a fresh cache: tokens still verify, with no request', async () => {
    const { clock, server, issuer, verifier } = await remote()
    assertOk(await verifier.verify(await issuer.sign({ jti: '1' })))
    await server.close()
    clock.advance(599_000)
    assertOk(await verifier.verify(await issuer.sign({ jti: '2' })))
  })

  test('server failing past the max age: stale keys serve until staleWhileErrorMs, then 503', async () => {
    const jwks = { cacheMaxAgeMs: 600_000, staleWhileErrorMs: 3_600_000, cooldownMs: 30_000 }
    const { clock, server, issuer, verifier } = await remote({ jwks })
    assertOk(await verifier.verify(await issuer.sign({ jti: '1' })))
    server.setMode('error')
    clock.advance(600_000)
    const sign = (jti: string) => issuer.sign({ jti }, { nowMs: clock.now() })
    assertOk(await verifier.verify(await sign('2')))
    assert.equal(server.requests, 2, 'the expired cache triggered one refetch')
    clock.advance(10_000)
    assertOk(await verifier.verify(await sign('3')))
    assert.equal(server.requests, 2, 'no refetch during the cooldown')
    clock.set(clock.now() + 3_590_000 - 1)
    assertOk(await verifier.verify(await sign('4')))
    clock.advance(1)
    const failure = failureOf(await verifier.verify(await sign('5')))
    assert.equal(failure.code, 'unavailable')
  })

  test('server down with no keys → unavailable (503) with Retry-After, never invalid_token or a throw', async () => {
    const { server, issuer, verifier } = await remote()
    await server.close()
    assert.deepEqual(failureOf(await verifier.verify(await issuer.sign())), {
      code: 'unavailable',
      dependency: 'jwks',
      retryAfterSeconds: 30,
    })
  })

  test('a failing JWKS is retried at most once per cooldown, and recovery is picked up', async () => {
    const { clock, server, issuer, verifier } = await remote()
    server.setMode('error')
    assert.equal(
      failureOf(await verifier.verify(await issuer.sign({ jti: '1' }))).code,
      'unavailable',
    )
    assert.equal(server.requests, 1)
    clock.advance(20_000)
    const failure = failureOf(await verifier.verify(await issuer.sign({ jti: '2' })))
    assert.deepEqual(failure, { code: 'unavailable', dependency: 'jwks', retryAfterSeconds: 10 })
    assert.equal(server.requests, 1)
    server.setMode('ok')
    clock.advance(10_000)
    assertOk(await verifier.verify(await issuer.sign({ jti: '3' })))
    assert.equal(server.requests, 2)
  })

  test('an unknown kid whose refetch fails → unavailable, not invalid_token', async () => {
    const { clock, server, issuer, verifier } = await remote()
    assertOk(await verifier.verify(await issuer.sign()))
    server.setMode('error')
    clock.advance(30_000)
    const token = await issuer.sign({}, { header: { kid: 'fresh-key' } })
    assert.equal(failureOf(await verifier.verify(token)).code, 'unavailable')
  })

  test('the fetch timeout is honoured: a hanging JWKS → unavailable within the timeout', async () => {
    const { server, issuer, verifier } = await remote({ jwks: { timeoutMs: 150 } })
    server.setMode('hang')
    const started = performance.now()
    assert.equal(failureOf(await verifier.verify(await issuer.sign())).code, 'unavailable')
    const elapsed = performance.now() - started
    assert.ok(elapsed >= 140 && elapsed < 2000, `took ${elapsed} ms`)
    assert.equal(server.requests, 1)
  })

  test('the injected fetch is used', async () => {
    const clock = createManualClock()
    const issuer = createTestIssuer({ clock })
    const urls: string[] = []
    const fetch: typeof globalThis.fetch = async (input) => {
      urls.push(String(input))
      return new Response(JSON.stringify({ keys: [issuer.publicJwk] }), { status: 200 })
    }
    const config: IssuerConfig = {
      ...issuer.config,
      keySource: { kind: 'jwks_url', url: 'https://idp.example/jwks' },
    }
    const verifier = createJwtVerifier([config], { clock, fetch })
    assertOk(await verifier.verify(await issuer.sign()))
    assert.deepEqual(urls, ['https://idp.example/jwks'])
  })

  test('a throwing fetch → unavailable, not a throw', async () => {
    const issuer = createTestIssuer()
    const config: IssuerConfig = {
      ...issuer.config,
      keySource: { kind: 'jwks_url', url: 'https://idp.example/jwks' },
    }
    const verifier = createJwtVerifier([config], {
      fetch: async () => {
        throw new TypeError('fetch failed')
      },
    })
    assert.equal(failureOf(await verifier.verify(await issuer.sign())).code, 'unavailable')
  })

  test('unusable keys in a JWKS are skipped; a JWKS with none usable counts as a failed fetch', async () => {
    const { clock, server, issuer, verifier } = await remote()
    const rsa = generateTestKeyPair('RS256')
    server.setJwks({
      keys: [
        { ...rsa.publicJwk, kid: 'rsa-ps512', alg: 'PS512' },
        {
          kty: 'oct',
          k: 'c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA',
          alg: 'HS256',
          kid: 'oct',
        },
        'not a key',
        issuer.publicJwk,
      ],
    })
    assertOk(await verifier.verify(await issuer.sign()))
    // RS512 is not on the default allow-list: this set has no usable key.
    server.setJwks({ keys: [{ ...rsa.publicJwk, kid: 'rsa-rs512', alg: 'RS512' }] })
    clock.advance(600_000)
    assertOk(
      await verifier.verify(await issuer.sign({ jti: 'stale keys kept' }, { nowMs: clock.now() })),
    )
    assert.equal(server.requests, 2)
  })

  test('a JWKS that is not JSON, not a key set, or too large (even with a good key) → unavailable', async () => {
    const clock = createManualClock()
    const issuer = createTestIssuer({ clock })
    const bodies = [
      'not json',
      JSON.stringify({ keys: 'x' }),
      JSON.stringify([issuer.publicJwk]),
      JSON.stringify({ keys: [issuer.publicJwk], pad: 'x'.repeat(300_000) }),
    ]
    for (const body of bodies) {
      const fetch: typeof globalThis.fetch = async () => new Response(body, { status: 200 })
      const config: IssuerConfig = {
        ...issuer.config,
        keySource: { kind: 'jwks_url', url: 'https://idp.example/jwks' },
      }
      const verifier = createJwtVerifier([config], { clock, fetch })
      assert.equal(failureOf(await verifier.verify(await issuer.sign())).code, 'unavailable')
    }
    const fetch: typeof globalThis.fetch = async () =>
      new Response(JSON.stringify({ keys: [issuer.publicJwk], pad: 'x'.repeat(200_000) }))
    const config: IssuerConfig = {
      ...issuer.config,
      keySource: { kind: 'jwks_url', url: 'https://idp.example/jwks' },
    }
    assertOk(await createJwtVerifier([config], { clock, fetch }).verify(await issuer.sign()))
  })

  test('a redirect from the JWKS URL is not followed', async () => {
    const clock = createManualClock()
    const issuer = createTestIssuer({ clock })
    const target = await startKeyServer({ keys: [issuer.publicJwk] })
    const redirector = createServer((_request, response) => {
      response.writeHead(302, { location: target.url }).end()
    })
    await new Promise<void>((resolve) => redirector.listen(0, '127.0.0.1', resolve))
    cleanups.push(
      () => target.close(),
      () => new Promise((resolve) => redirector.close(resolve)),
    )
    const { port } = redirector.address() as AddressInfo
    const config: IssuerConfig = {
      ...issuer.config,
      keySource: { kind: 'jwks_url', url: `http://127.0.0.1:${port}/jwks` },
    }
    const verifier = createJwtVerifier([config], { clock })
    assert.equal(failureOf(await verifier.verify(await issuer.sign())).code, 'unavailable')
    assert.equal(target.requests, 0)
  })

  test('HS256 tokens are refused for a JWKS URL issuer without fetching keys', async () => {
    const { server, verifier } = await remote()
    const hmac = createTestIssuer({ alg: 'HS256' })
    const failure = failureOf(await verifier.verify(await hmac.sign()))
    assert.equal((failure as { reason?: string }).reason, 'algorithm_not_allowed')
    assert.equal(server.requests, 0)
  })

  test('unknown issuers never cause a JWKS request', async () => {
    const { server, issuer, verifier } = await remote()
    failureOf(await verifier.verify(await issuer.sign({ iss: 'https://elsewhere.test' })))
    assert.equal(server.requests, 0)
  })

  test('close() makes later lookups fail closed as unavailable', async () => {
    const { issuer, verifier } = await remote()
    verifier.close()
    assert.equal(failureOf(await verifier.verify(await issuer.sign())).code, 'unavailable')
  })
})

describe('remote JWKS: an unknown kid during the refetch cooldown', () => {
  const COOLDOWN = 30_000

  test('a kid published right after a fetch → 503 with the rest of the cooldown as Retry-After, then 200 (never 401)', async () => {
    const { clock, server, issuer, verifier } = await remote({ jwks: { cooldownMs: COOLDOWN } })
    assertOk(await verifier.verify(await issuer.sign({ jti: 'first load' })))
    assert.equal(server.requests, 1)
    const next = rotatedKey(issuer, 'key-2')
    server.setJwks({ keys: [issuer.publicJwk, next.jwk] })
    clock.advance(12_000)
    const token = await next.sign()
    assert.deepEqual(failureOf(await verifier.verify(token)), {
      code: 'unavailable',
      dependency: 'jwks',
      retryAfterSeconds: 18,
    })
    assert.equal(server.requests, 1, 'no refetch inside the cooldown')
    clock.advance(17_999)
    assert.equal(failureOf(await verifier.verify(token)).code, 'unavailable')
    assert.equal(server.requests, 1)
    clock.advance(1)
    assertOk(await verifier.verify(token))
    assert.equal(server.requests, 2)
  })

  test('a made-up kid that arms the cooldown cannot turn a newly published key into a 401', async () => {
    const { clock, server, issuer, verifier } = await remote({ jwks: { cooldownMs: COOLDOWN } })
    assertOk(await verifier.verify(await issuer.sign({ jti: 'first load' })))
    clock.advance(COOLDOWN)
    const madeUp = failureOf(await verifier.verify(await issuer.sign({}, { header: { kid: 'x' } })))
    assert.equal(madeUp.code, 'invalid_token', 'refetched just now: the kid is really unknown')
    assert.equal(server.requests, 2)
    const next = rotatedKey(issuer, 'key-2')
    server.setJwks({ keys: [issuer.publicJwk, next.jwk] })
    clock.advance(1000)
    const token = await next.sign()
    assert.equal(failureOf(await verifier.verify(token)).code, 'unavailable')
    clock.advance(COOLDOWN - 1000)
    assertOk(await verifier.verify(token))
    assert.equal(server.requests, 3)
  })

  test('a token issued before the last fetch, with an unknown kid → 401 unknown_key at once, no request', async () => {
    const { clock, server, issuer, verifier } = await remote({ jwks: { cooldownMs: COOLDOWN } })
    const fetchedAt = clock.now()
    assertOk(await verifier.verify(await issuer.sign({ jti: 'first load' })))
    clock.advance(5000)
    // The issuer's clock may be 30 s (the clock tolerance) behind ours, and iat is floored:
    // a token is known to predate the fetch only when iat + 1 s + 30 s <= the fetch time.
    const oldToken = (nowMs: number) =>
      issuer.sign({ jti: String(nowMs) }, { header: { kid: 'retired' }, nowMs })
    assert.deepEqual(failureOf(await verifier.verify(await oldToken(fetchedAt - 31_000))), {
      code: 'invalid_token',
      reason: 'unknown_key',
      detail: 'the signing key is not known',
    })
    assert.equal(
      failureOf(await verifier.verify(await oldToken(fetchedAt - 30_000))).code,
      'unavailable',
      'within the clock tolerance of the fetch: cannot tell yet',
    )
    assert.equal(server.requests, 1)
  })

  test('a token without iat and an unknown kid → 503 during the cooldown, 401 once a refetch confirms it', async () => {
    const { clock, server, issuer, verifier } = await remote({ jwks: { cooldownMs: COOLDOWN } })
    assertOk(await verifier.verify(await issuer.sign({ jti: 'first load' })))
    clock.advance(10_000)
    const token = await issuer.sign({ iat: undefined }, { header: { kid: 'unknown' } })
    assert.deepEqual(failureOf(await verifier.verify(token)), {
      code: 'unavailable',
      dependency: 'jwks',
      retryAfterSeconds: 20,
    })
    clock.advance(20_000)
    assert.equal(
      (failureOf(await verifier.verify(token)) as { reason?: string }).reason,
      'unknown_key',
    )
    assert.equal(server.requests, 2)
  })

  test('forged tokens (made-up kid, iat now, in the future or absent) cannot raise the refetch rate above one per cooldown', async () => {
    const { clock, server, issuer, verifier } = await remote({ jwks: { cooldownMs: COOLDOWN } })
    assertOk(await verifier.verify(await issuer.sign({ jti: 'first load' })))
    const iats = [
      (nowMs: number) => Math.floor(nowMs / 1000),
      (nowMs: number) => Math.floor(nowMs / 1000) + 3600,
      () => undefined,
      () => 1e308,
    ]
    const codes = new Map<string, number>()
    // Five minutes of four forged tokens every 250 ms, concurrently.
    for (let tick = 1; tick <= 1200; tick++) {
      clock.advance(250)
      const tokens = await Promise.all(
        iats.map((iat, n) =>
          issuer.sign(
            { iat: iat(clock.now()), jti: `${tick}-${n}` },
            { header: { kid: `f${tick}-${n}` } },
          ),
        ),
      )
      for (const outcome of await Promise.all(tokens.map((t) => verifier.verify(t)))) {
        const { code } = failureOf(outcome)
        codes.set(code, (codes.get(code) ?? 0) + 1)
      }
    }
    assert.equal(server.requests - 1, 300_000 / COOLDOWN, 'one refetch per cooldown, no more')
    assert.deepEqual([...codes.keys()].sort(), ['invalid_token', 'unavailable'])
    // The valid token keeps verifying throughout.
    assertOk(await verifier.verify(await issuer.sign({ jti: 'still fine' })))
  })
})

describe('remote JWKS: keys published without alg, and keys that cannot be used', () => {
  const COOLDOWN = 30_000

  /** An RSA signer whose public key the JWKS publishes as `jwk` (by default without `alg`). */
  async function published(
    keys: (signer: ReturnType<typeof createTestIssuer>) => Record<string, unknown>[],
    algorithms?: readonly string[],
  ) {
    const clock = createManualClock()
    const signer = createTestIssuer({ alg: 'RS256', kid: 'rsa-1', clock })
    const server = await startKeyServer({ keys: keys(signer) })
    const pool = createJwksPool()
    const skipped: { issuer: string; keys: readonly SkippedKey[] }[] = []
    const config: IssuerConfig = {
      ...signer.config,
      keySource: { kind: 'jwks_url', url: server.url },
      algorithms,
    }
    const verifier = createJwtVerifier([config], {
      clock,
      jwks: { cooldownMs: COOLDOWN },
      jwksPool: pool,
      onSkippedKeys: (issuer, keys) => skipped.push({ issuer, keys }),
    })
    cleanups.push(
      () => server.close(),
      () => verifier.close(),
      () => pool.close(),
    )
    /** A token of `signer`'s key under `alg` (RS* or PS*), naming `kid`. */
    const sign = (alg: string, kid: string | undefined = 'rsa-1', claims = {}) =>
      signCompact(
        Object.fromEntries(Object.entries({ alg, kid }).filter(([, v]) => v !== undefined)),
        signer.claims(claims),
        signer.privateKey,
      )
    return { clock, signer, server, pool, skipped, verifier, sign }
  }
  const withoutAlg = (signer: ReturnType<typeof createTestIssuer>) => {
    const { alg: _alg, ...jwk } = signer.publicJwk as Record<string, unknown>
    return jwk
  }

  test('an RSA key without alg verifies RS256 and PS256 under the default allow-list', async () => {
    const { verifier, sign, pool, skipped } = await published((s) => [withoutAlg(s)])
    assertOk(await verifier.verify(sign('RS256')))
    assertOk(await verifier.verify(sign('PS256')))
    assertOk(await verifier.verify(sign('PS256', undefined, { jti: 'no kid' })))
    // Not on the default allow-list, whatever the key could do.
    assert.equal(
      (failureOf(await verifier.verify(sign('RS512'))) as { reason?: string }).reason,
      'algorithm_not_allowed',
    )
    assert.deepEqual(pool.statuses()[0]?.skippedKeys, [])
    assert.deepEqual(skipped, [])
  })

  test('an RSA key without alg verifies exactly the RSA algorithms of an explicit allow-list', async () => {
    const { verifier, sign } = await published((s) => [withoutAlg(s)], ['PS384', 'ES256'])
    assertOk(await verifier.verify(sign('PS384')))
    for (const alg of ['RS256', 'PS256', 'RS384']) {
      assert.equal(
        (failureOf(await verifier.verify(sign(alg))) as { reason?: string }).reason,
        'algorithm_not_allowed',
        alg,
      )
    }
  })

  test('a key that fits no allowed algorithm is skipped: listed in the status, reported once per load, its tokens a stable 401', async () => {
    const es = createTestIssuer({ alg: 'ES256', kid: 'ec-1' })
    const { clock, verifier, sign, pool, skipped, server, signer } = await published(
      (s) => [{ ...withoutAlg(s), alg: 'PS256' }, es.publicJwk as Record<string, unknown>],
      ['RS256', 'ES256'],
    )
    const expected = {
      code: 'invalid_token',
      reason: 'unusable_key',
      detail:
        'the issuer publishes the signing key, but it cannot be used with the allowed algorithms',
    }
    // First token: loads the set. Then again and again, inside and after cooldowns: never 503.
    for (let round = 0; round < 4; round++) {
      for (let n = 0; n < 5; n++) {
        assert.deepEqual(
          failureOf(await verifier.verify(sign('RS256', 'rsa-1', { jti: `${round}.${n}` }))),
          expected,
        )
      }
      clock.advance(COOLDOWN / 2)
    }
    assert.deepEqual(pool.statuses()[0]?.skippedKeys, [
      {
        kid: 'rsa-1',
        reason: 'algorithm_not_allowed',
        detail: 'the key\'s "alg" PS256 is not on the issuer\'s allow-list',
      },
    ])
    assert.equal(pool.statuses()[0]?.state, 'fresh')
    assert.equal(server.requests, 1, 'a skipped kid is no reason to refetch')
    assert.equal(skipped.length, 1, 'one report per key set load, not one per token')
    assert.equal(skipped[0]?.issuer, 'https://issuer.test')
    assert.ok(!JSON.stringify(skipped).includes(String(signer.publicJwk?.n)), 'no key material')
    // The key set is loaded again past its maximum age: one more report.
    clock.advance(600_000)
    await pool.warm()
    assert.equal(server.requests, 2)
    assert.equal(skipped.length, 2)
  })

  test('a set whose only key is unusable: not loaded, its kid 401 (not 503), other kids 503 until keys arrive', async () => {
    const { clock, verifier, sign, pool, skipped, server, signer } = await published(() => [
      { kty: 'RSA', kid: 'rsa-1', n: Buffer.alloc(128, 0xc1).toString('base64url'), e: 'AQAB' },
    ])
    const first = failureOf(await verifier.verify(sign('RS256')))
    assert.equal(first.code, 'invalid_token')
    assert.equal((first as { reason?: string }).reason, 'unusable_key')
    const status = pool.statuses()[0]
    assert.equal(status?.state, 'unavailable')
    assert.deepEqual(
      status?.skippedKeys.map((k) => [k.kid, k.reason]),
      [['rsa-1', 'invalid_key']],
    )
    assert.equal(skipped.length, 1)
    for (let n = 0; n < 3; n++) {
      assert.equal(
        (
          failureOf(await verifier.verify(sign('RS256', 'rsa-1', { jti: String(n) }))) as {
            reason?: string
          }
        ).reason,
        'unusable_key',
      )
    }
    assert.equal(failureOf(await verifier.verify(sign('RS256', 'other'))).code, 'unavailable')
    assert.equal(server.requests, 1, 'inside the cooldown')
    // The provider publishes a usable key: it is learned at the next refetch.
    server.setJwks({ keys: [withoutAlg(signer)] })
    clock.advance(COOLDOWN)
    assertOk(await verifier.verify(sign('RS256', 'rsa-1', { jti: 'now usable' })))
    assert.equal(pool.statuses()[0]?.state, 'fresh')
    assert.deepEqual(pool.statuses()[0]?.skippedKeys, [])
  })

  test('an inline JWKS: an RSA key without alg is bound under the allow-list; one that fits none refuses the issuer', async () => {
    const signer = createTestIssuer({ alg: 'RS256', kid: 'rsa-1' })
    const inline = (algorithms?: readonly string[]): IssuerConfig => ({
      ...signer.config,
      keySource: { kind: 'jwks', jwks: { keys: [withoutAlg(signer)] } },
      algorithms,
    })
    const verifier = createJwtVerifier([inline()])
    cleanups.push(() => verifier.close())
    for (const alg of ['RS256', 'PS256']) {
      const token = signCompact({ alg, kid: 'rsa-1' }, signer.claims(), signer.privateKey)
      assertOk(await verifier.verify(token))
    }
    assert.throws(
      () => createJwtVerifier([inline(['ES256'])]),
      /JWKS key 0 \(kid rsa-1\): .*allow-list/,
    )
  })

  test('keys marked for encryption are passed over silently: not skipped, not reported', async () => {
    const encryption = generateTestKeyPair('RS256')
    const { verifier, sign, pool, skipped } = await published((s) => [
      withoutAlg(s),
      { ...encryption.publicJwk, kid: 'enc-1', use: 'enc', alg: 'RSA-OAEP-256' },
    ])
    assertOk(await verifier.verify(sign('RS256')))
    assert.deepEqual(pool.statuses()[0]?.skippedKeys, [])
    assert.deepEqual(skipped, [])
  })
})

describe('JWKS URL', () => {
  test('https is required, except http on a loopback host', () => {
    assert.equal(checkJwksUrl('https://idp.example/jwks').host, 'idp.example')
    assert.equal(checkJwksUrl('http://127.0.0.1:8080/jwks').port, '8080')
    assert.equal(checkJwksUrl('http://localhost/jwks').hostname, 'localhost')
    assert.equal(checkJwksUrl('http://[::1]/jwks').hostname, '[::1]')
    for (const url of [
      'http://idp.example/jwks',
      'ftp://idp.example/jwks',
      'file:///etc/jwks',
      'nope',
    ]) {
      assert.throws(() => checkJwksUrl(url))
    }
  })

  test('credentials in the URL are refused (the one rule the CLI and the server share)', () => {
    assert.throws(() => checkJwksUrl('https://user:pw@idp.example/jwks'), /credentials/)
    assert.throws(() => checkJwksUrl('https://user@idp.example/jwks'), /credentials/)
  })

  test('a verifier with a plain-http JWKS URL on a public host is refused at configuration', () => {
    const issuer = createTestIssuer()
    const config: IssuerConfig = {
      ...issuer.config,
      keySource: { kind: 'jwks_url', url: 'http://idp.example/jwks' },
    }
    assert.throws(() => createJwtVerifier([config]), /https/)
  })
})
