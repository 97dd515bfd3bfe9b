import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { generateKeyPairSync } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import Provider from 'oidc-provider'
import {
  assertNoEcho,
  bearer,
  eventually,
  type Gate,
  startGate,
  tenantHeader,
} from '../attack/harness.ts'
import {
  clientCredentialsClient,
  clientCredentialsFeatures,
  clientCredentialsGrant,
  type ProviderHost,
  startProviderHost,
  tokenEndpointOf,
} from '../helpers/oidc-provider.ts'

/**
 * A real OpenID Provider that nobody here wrote (`oidc-provider`, OpenID Certified), on
 * 127.0.0.1, issuing JWT access tokens through a real client-credentials grant: resource
 * indicators make the access token a JWT (`typ: at+jwt`) for the audience `tokengate`, and
 * `extraTokenClaims` adds the client's `tenant_id`. tokengate knows only the issuer URL: it
 * finds the JWKS through `/.well-known/openid-configuration` (`issuer add --discovery`).
 */
describe('a real OpenID Provider (oidc-provider) with discovery', () => {
  let gate: Gate
  let idp: ProviderHost
  let issuer: string
  let tokenEndpoint: string
  const clients = {
    'acme-service': { secret: 'acme-service-secret-0123456789abcdef', tenant: 'acme' },
    'other-service': { secret: 'other-service-secret-0123456789abcdef', tenant: 'other' },
  } as const

  before(async () => {
    idp = await startProviderHost()
    issuer = idp.issuer
    const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'idp-es256-1', use: 'sig' }
    const provider = new Provider(issuer, {
      jwks: { keys: [signingKey] },
      clients: Object.entries(clients).map(([id, client]) =>
        clientCredentialsClient(id, client.secret),
      ),
      clientDefaults: { id_token_signed_response_alg: 'ES256' },
      features: clientCredentialsFeatures('urn:tokengate', (resource) => {
        if (resource !== 'urn:tokengate') throw new Error('unknown resource')
        return {
          audience: 'tokengate',
          scope: 'tokens:read audit:read',
          accessTokenFormat: 'jwt',
          accessTokenTTL: 300,
          jwt: { sign: { alg: 'ES256' } },
        }
      }),
      extraTokenClaims: (_ctx: unknown, token: { clientId?: string }) => {
        const client = clients[token.clientId as keyof typeof clients]
        return client ? { tenant_id: client.tenant } : undefined
      },
    })
    idp.serve(provider.callback())
    tokenEndpoint = await tokenEndpointOf(issuer)

    gate = await startGate()
    for (const id of ['acme', 'other'])
      assert.equal((await gate.cli('tenant', 'create', id)).code, 0)
    const added = await gate.cli(
      'issuer',
      'add',
      '--issuer',
      issuer,
      '--audience',
      'tokengate',
      '--discovery',
      '--permissions-claim',
      'scope',
    )
    assert.equal(added.code, 0, added.stderr)
    const probe = await grant('acme-service')
    await eventually(async () => (await me(probe, 'acme')).status === 200, 5000, 'the issuer')
  })

  after(async () => {
    await gate?.close()
    await idp?.close()
  })

  /** A real client-credentials grant at the provider's token endpoint. */
  function grant(clientId: keyof typeof clients, scope = 'tokens:read'): Promise<string> {
    const client = { id: clientId, secret: clients[clientId].secret }
    return clientCredentialsGrant(tokenEndpoint, client, { resource: 'urn:tokengate', scope })
  }

  function me(token: string, tenant?: string) {
    return gate.request('/api/v1/me', [...bearer(token), ...(tenant ? tenantHeader(tenant) : [])])
  }

  it('the provider issues a signed JWT access token (typ at+jwt) for audience tokengate with tenant_id', async () => {
    const token = await grant('acme-service')
    const [header, payload] = token
      .split('.')
      .slice(0, 2)
      .map((part) => JSON.parse(Buffer.from(part, 'base64url').toString('utf8')))
    assert.equal(header.typ, 'at+jwt')
    assert.equal(header.alg, 'ES256')
    assert.equal(header.kid, 'idp-es256-1')
    assert.equal(payload.iss, issuer)
    assert.equal(payload.aud, 'tokengate')
    assert.equal(payload.tenant_id, 'acme')
    assert.equal(payload.sub, 'acme-service')
  })

  it('a client-credentials token with the right X-Tenant-Id → 200 as that tenant, subject and scopes', async () => {
    const token = await grant('acme-service', 'tokens:read audit:read')
    const r = await me(token, 'acme')
    assert.equal(r.status, 200, r.text)
    assert.equal(r.json.tenantId, 'acme')
    assert.equal(r.json.subject, 'acme-service')
    assert.equal(r.json.tokenType, 'jwt')
    assert.deepEqual([...(r.json.permissions as string[])].sort(), ['audit:read', 'tokens:read'])
    assert.equal(
      (await gate.request('/api/v1/tokens', [...bearer(token), ...tenantHeader('acme')])).status,
      200,
    )
  })

  it('the same token without X-Tenant-Id → 401 tenant_header_required', async () => {
    const token = await grant('acme-service')
    const r = await me(token)
    assert.equal(r.status, 401)
    assert.equal(r.json.code, 'tenant_header_required')
    assertNoEcho(r, [token])
  })

  it("the same token with another tenant's X-Tenant-Id → 401 tenant_mismatch", async () => {
    const token = await grant('acme-service')
    for (const tenant of ['other', 'ACME', 'acme2', 'acm']) {
      const r = await me(token, tenant)
      assert.equal(r.status, 401, tenant)
      assert.equal(r.json.code, 'tenant_mismatch')
      assertNoEcho(r, [token])
    }
  })

  it("another client's token acts for its own tenant only", async () => {
    const token = await grant('other-service')
    assert.equal((await me(token, 'other')).status, 200)
    assert.equal((await me(token, 'acme')).json.code, 'tenant_mismatch')
  })

  it('a token without a granted scope is authenticated but refused with 403 where the permission is needed', async () => {
    const token = await grant('acme-service', 'audit:read')
    assert.equal((await me(token, 'acme')).status, 200)
    const r = await gate.request('/api/v1/tokens', [...bearer(token), ...tenantHeader('acme')])
    assert.equal(r.status, 403)
    assert.equal(r.json.code, 'insufficient_permission')
  })

  it('a provider token altered in any segment → 401 invalid_token', async () => {
    const token = await grant('acme-service')
    const [h, p, s] = token.split('.') as [string, string, string]
    const payload = JSON.parse(Buffer.from(p, 'base64url').toString('utf8'))
    const forged = Buffer.from(JSON.stringify({ ...payload, tenant_id: 'other' })).toString(
      'base64url',
    )
    const flipped = `${s.slice(0, -2)}${s.at(-2) === 'A' ? 'B' : 'A'}${s.at(-1)}`
    for (const bad of [`${h}.${forged}.${s}`, `${h}.${p}.${flipped}`, `${h}.${p}.`]) {
      const r = await me(bad, 'other')
      assert.equal(r.status, 401)
      assert.equal(r.json.code, 'invalid_token')
    }
  })

  it('/readyz lists no issuer as not loaded once discovery and the JWKS have been read', async () => {
    const r = await gate.request('/readyz')
    assert.equal(r.status, 200)
    const issuers = (r.json.checks as { issuers: { notLoaded: string[]; remote: number } }).issuers
    assert.deepEqual(issuers.notLoaded, [])
    assert.equal(issuers.remote, 1)
  })

  it("an issuer spelled differently from the provider's own issuer is never trusted (discovery issuer must match)", async () => {
    // Same provider, reached as localhost: its discovery document says 127.0.0.1.
    const alias = issuer.replace('127.0.0.1', 'localhost')
    const added = await gate.cli(
      'issuer',
      'add',
      '--issuer',
      alias,
      '--audience',
      'tokengate',
      '--discovery',
    )
    assert.equal(added.code, 0, added.stderr)
    await eventually(
      async () => {
        const r = await gate.request('/readyz')
        const issuers = (r.json.checks as { issuers: { notLoaded: string[] } }).issuers
        return issuers.notLoaded.includes(alias)
      },
      5000,
      'the alias listed as not loaded',
    )
    // Tokens of the real issuer keep working beside it.
    assert.equal((await me(await grant('acme-service'), 'acme')).status, 200)
    assert.equal((await gate.cli('issuer', 'remove', alias)).code, 0)
  })

  it('issuer add --discovery refuses a plain-http issuer that is not on loopback', async () => {
    const r = await gate.cli(
      'issuer',
      'add',
      '--issuer',
      'http://idp.example.com',
      '--audience',
      'tokengate',
      '--discovery',
    )
    assert.equal(r.code, 2, r.stderr)
    assert.match(r.stderr, /https/)
  })
})
