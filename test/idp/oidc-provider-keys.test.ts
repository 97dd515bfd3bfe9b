import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import Provider from 'oidc-provider'
import { bearer, eventually, type Gate, startGate, tenantHeader } from '../attack/harness.ts'
import { signCompact } from '../helpers/jwt.ts'
import {
  clientCredentialsClient,
  clientCredentialsFeatures,
  clientCredentialsGrant,
  type ProviderHost,
  startProviderHost,
  tokenEndpointOf,
} from '../helpers/oidc-provider.ts'

/**
 * Interop with a real OpenID Provider (`oidc-provider`) whose signing keys are configured the
 * way operators generate them: private JWKs exported without `alg` (RFC 7517 §4.4 makes it
 * optional; oidc-provider then publishes them without `alg`, as Microsoft Entra ID does).
 * Client-credentials grants give RFC 9068 `at+jwt` access tokens; tokengate knows only the
 * issuer URL (`issuer add --discovery`, default algorithm allow-list). Each resource
 * `urn:tokengate:<alg>:<kid>` has the provider sign with that algorithm and key.
 *
 * Then, in order: rotation to a new alg-less RSA key (learned by the unknown-kid refetch),
 * withdrawal of the old key (its tokens 401 once the key set is refetched), and the provider
 * down (keys kept while stale, then 503 with Retry-After), as docs/security.md says.
 */
describe('oidc-provider with keys published without alg: RS256, PS256, ES256, EdDSA, rotation, outage', () => {
  const COOLDOWN_MS = 30_000
  const MAX_AGE_MS = 600_000
  const STALE_MS = 3_600_000
  let gate: Gate
  let idp: ProviderHost
  let issuer: string
  let tokenEndpoint: string
  const client = { id: 'acme-service', secret: 'acme-service-secret-0123456789abcdef' }

  /** A private signing JWK as `KeyObject.export({ format: 'jwk' })` gives it: no `alg`, no `use`. */
  const key = (
    type: 'rsa' | 'ec' | 'ed25519',
    kid: string,
    extra: Record<string, unknown> = {},
  ) => {
    const pair =
      type === 'rsa'
        ? generateKeyPairSync('rsa', { modulusLength: 2048 })
        : type === 'ec'
          ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
          : generateKeyPairSync('ed25519')
    return {
      kid,
      privateKey: pair.privateKey,
      jwk: { ...pair.privateKey.export({ format: 'jwk' }), kid, ...extra },
      publicJwk: pair.publicKey.export({ format: 'jwk' }) as Record<string, unknown>,
    }
  }
  const rsa1 = key('rsa', 'rsa-1')
  const rsaWithAlg = key('rsa', 'rsa-ps256', { alg: 'PS256', use: 'sig' })
  const rsaRs512 = key('rsa', 'rsa-rs512', { alg: 'RS512', use: 'sig' })
  const ec1 = key('ec', 'ec-1')
  const ed1 = key('ed25519', 'ed-1', { alg: 'EdDSA' })
  const rsa2 = key('rsa', 'rsa-2')

  /** Serves a provider with these keys at `issuer` (the same URL across rotations). */
  function serveProvider(keys: readonly { jwk: Record<string, unknown> }[]) {
    const provider = new Provider(issuer, {
      jwks: { keys: keys.map((k) => k.jwk) },
      clients: [clientCredentialsClient(client.id, client.secret)],
      features: clientCredentialsFeatures('urn:tokengate:ES256:ec-1', (resource) => {
        const [, , alg, kid] = resource.split(':')
        return {
          audience: 'tokengate',
          scope: 'tokens:read',
          accessTokenFormat: 'jwt',
          accessTokenTTL: 7200,
          jwt: { sign: { alg, kid } },
        }
      }),
      extraTokenClaims: () => ({ tenant_id: 'acme' }),
    })
    idp.serve(provider.callback())
  }

  before(async () => {
    idp = await startProviderHost()
    issuer = idp.issuer
    serveProvider([rsa1, rsaWithAlg, rsaRs512, ec1, ed1])
    tokenEndpoint = await tokenEndpointOf(issuer)

    gate = await startGate({ auth: { jwksTimeoutMs: 1000 } })
    assert.equal((await gate.cli('tenant', 'create', 'acme')).code, 0)
    const added = await gate.cli(
      ...['issuer', 'add', '--issuer', issuer, '--audience', 'tokengate', '--discovery'],
      ...['--permissions-claim', 'scope'],
    )
    assert.equal(added.code, 0, added.stderr)
    const probe = await grant('ES256', 'ec-1')
    await eventually(async () => (await me(probe)).status === 200, 5000, 'the issuer')
  })

  after(async () => {
    await gate?.close()
    await idp?.close()
  })

  /** A real client-credentials grant for a token signed with `alg` by the key `kid`. */
  async function grant(alg: string, kid: string): Promise<string> {
    const token = await clientCredentialsGrant(tokenEndpoint, client, {
      resource: `urn:tokengate:${alg}:${kid}`,
    })
    const header = JSON.parse(Buffer.from(token.split('.')[0] as string, 'base64url').toString())
    assert.deepEqual([header.typ, header.alg, header.kid], ['at+jwt', alg, kid])
    return token
  }

  /** A token the provider never issued, signed with one of its keys (for a header it won't make). */
  function forge(privateKey: KeyObject, alg: string, kid: string): string {
    const now = Math.floor(Date.now() / 1000)
    const claims = {
      iss: issuer,
      aud: 'tokengate',
      sub: 'x',
      tenant_id: 'acme',
      scope: 'tokens:read',
    }
    return signCompact(
      { alg, kid, typ: 'at+jwt' },
      { ...claims, iat: now, exp: now + 600 },
      privateKey,
    )
  }

  const me = (token: string) =>
    gate.request('/api/v1/me', [...bearer(token), ...tenantHeader('acme')])
  interface ReadyIssuers {
    readonly status: unknown
    readonly notLoaded: readonly string[]
    readonly stale: readonly string[]
    readonly skippedKeys: readonly { issuer: string; kid: string | null; reason: string }[]
  }
  const readyIssuers = async (): Promise<ReadyIssuers> => {
    const r = await gate.request('/readyz')
    assert.equal(r.status, 200)
    return {
      status: r.json.status,
      ...(r.json.checks as { issuers: Omit<ReadyIssuers, 'status'> }).issuers,
    }
  }
  const skippedLogLines = () => gate.logs.filter((line) => line.includes('cannot be used'))

  it('the provider publishes its RSA key configured without alg as it is', async () => {
    const { jwks_uri: jwksUri } = await (
      await fetch(`${issuer}/.well-known/openid-configuration`)
    ).json()
    const { keys } = (await (await fetch(jwksUri)).json()) as { keys: Record<string, unknown>[] }
    const byKid = new Map(keys.map((k) => [k.kid, k]))
    // RSA keys fit several algorithms: published without alg (an EC key gets its one alg).
    assert.equal(byKid.get('rsa-1')?.alg, undefined)
    assert.equal(byKid.get('rsa-ps256')?.alg, 'PS256')
    assert.equal(byKid.get('ed-1')?.alg, 'EdDSA')
  })

  for (const [alg, kid] of [
    ['RS256', 'rsa-1'],
    ['PS256', 'rsa-1'],
    ['PS256', 'rsa-ps256'],
    ['ES256', 'ec-1'],
    ['EdDSA', 'ed-1'],
  ] as const) {
    it(`an at+jwt access token signed ${alg} by ${kid} (${kid === 'rsa-1' ? 'published without alg' : 'published with alg'}) → 200`, async () => {
      const r = await me(await grant(alg, kid))
      assert.equal(r.status, 200, r.text)
      assert.equal(r.json.tenantId, 'acme')
      assert.equal(r.json.subject, client.id)
    })
  }

  it('the key whose alg is off the allow-list is skipped: /readyz degraded naming issuer, kid and reason; one log line per key set load', async () => {
    const issuers = await readyIssuers()
    assert.equal(issuers.status, 'degraded')
    assert.deepEqual(issuers.notLoaded, [])
    assert.deepEqual(issuers.skippedKeys, [
      { issuer, kid: 'rsa-rs512', reason: 'algorithm_not_allowed' },
    ])
    const lines = skippedLogLines()
    assert.equal(lines.length, 1, lines.join('\n'))
    const line = JSON.parse(lines[0] as string)
    assert.equal(line.issuer, issuer)
    assert.deepEqual(
      line.skippedKeys.map((k: { kid: string; reason: string }) => [k.kid, k.reason]),
      [['rsa-rs512', 'algorithm_not_allowed']],
    )
    assert.ok(
      !(lines[0] as string).includes(String(rsaRs512.publicJwk.n).slice(0, 24)),
      'no key material',
    )
  })

  it('tokens of the skipped key are a stable 401 invalid_token, never 503 with Retry-After', async () => {
    const issued = await grant('RS512', 'rsa-rs512')
    const forged = forge(rsaRs512.privateKey, 'RS256', 'rsa-rs512')
    for (let n = 0; n < 3; n++) {
      for (const token of [issued, forged]) {
        const r = await me(token)
        assert.equal(r.status, 401, r.text)
        assert.equal(r.json.code, 'invalid_token')
        assert.equal(r.headers['retry-after'], undefined)
      }
    }
    // The provider's RS512 token fails the allow-list; an RS256 one naming the key, its key.
    assert.match((await me(forged)).json.detail as string, /publishes the signing key/)
    assert.equal(skippedLogLines().length, 1, 'no log line per request')
  })

  it('issuer add --algorithms RS256,ES256: the alg-less RSA key verifies RS256 only; keys of other algorithms are skipped', async () => {
    const readd = (...algorithms: string[]) =>
      gate.cli(
        ...['issuer', 'add', '--issuer', issuer, '--audience', 'tokengate', '--discovery'],
        ...['--permissions-claim', 'scope', ...algorithms],
      )
    assert.equal((await readd('--algorithms', 'RS256,ES256')).code, 0)
    // The server picks the change up through the store's change feed.
    await eventually(
      async () => (await me(await grant('PS256', 'rsa-1'))).status === 401,
      5000,
      'the new allow-list',
    )
    const ps = await me(await grant('PS256', 'rsa-1'))
    assert.equal(ps.json.code, 'invalid_token')
    assert.equal(ps.headers['retry-after'], undefined)
    const rs = await me(await grant('RS256', 'rsa-1'))
    assert.equal(rs.status, 200, rs.text)
    const skipped = (await readyIssuers()).skippedKeys.map((k) => [k.kid, k.reason]).sort()
    assert.deepEqual(skipped, [
      ['ed-1', 'algorithm_not_allowed'],
      ['rsa-ps256', 'algorithm_not_allowed'],
      ['rsa-rs512', 'algorithm_not_allowed'],
    ])
    assert.equal((await readd()).code, 0)
    await eventually(async () => (await me(await grant('PS256', 'rsa-1'))).status === 200)
  })

  it('rotation: a token of a new alg-less RSA key is accepted once the key set is refetched, never 401', async () => {
    serveProvider([rsa2, rsa1, ec1])
    const next = await grant('PS256', 'rsa-2')
    let r = await me(next)
    if (r.status === 503) {
      // Inside the cooldown of the last fetch: "cannot tell yet", retried after Retry-After.
      assert.ok(Number(r.headers['retry-after']) <= COOLDOWN_MS / 1000, r.text)
      gate.clock.advance(COOLDOWN_MS)
      r = await me(next)
    }
    assert.equal(r.status, 200, r.text)
    assert.equal((await me(await grant('RS256', 'rsa-2'))).status, 200)
    assert.deepEqual((await readyIssuers()).skippedKeys, [], 'the RS512 key is no longer published')
  })

  it('withdrawal: once the key set is refetched without the old key, its tokens get 401, those verified (and cached) before too', async () => {
    const old = await grant('RS256', 'rsa-1')
    const used = await grant('RS256', 'rsa-1')
    assert.equal((await me(used)).status, 200, 'verified while the key is published: cached')
    serveProvider([rsa2, ec1])
    gate.clock.advance(MAX_AGE_MS)
    const r = await me(old)
    assert.equal(r.status, 401, r.text)
    assert.equal(r.json.code, 'invalid_token')
    const cached = await me(used)
    assert.equal(cached.status, 401, cached.text)
    assert.equal(cached.json.detail, 'the signing key has been withdrawn by its issuer')
    assert.equal((await me(await grant('PS256', 'rsa-2'))).status, 200)
  })

  it('outage: keys are kept while stale (200, /readyz degraded), then 503 with Retry-After', async () => {
    const token = await grant('RS256', 'rsa-2')
    const other = await grant('ES256', 'ec-1')
    idp.serve((_request, response) => response.writeHead(503).end())
    gate.clock.advance(MAX_AGE_MS)
    assert.equal((await me(token)).status, 200, 'stale keys verify while the provider is down')
    await eventually(
      async () => (await readyIssuers()).stale.includes(issuer),
      5000,
      'the issuer listed as stale',
    )
    gate.clock.advance(STALE_MS)
    const r = await me(other)
    assert.equal(r.status, 503, r.text)
    assert.equal(r.json.code, 'unavailable')
    assert.ok(Number(r.headers['retry-after']) >= 1)
    assert.ok((await readyIssuers()).notLoaded.includes(issuer))
  })
})
