import assert from 'node:assert/strict'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { createTestIssuer, type KeyServer, startKeyServer } from '../helpers/jwt.ts'
import { bearer, eventually, type Gate, startGate, tenantHeader } from './harness.ts'

/**
 * A discovery document is data from the network: if its `jwks_uri` were followed anywhere,
 * whoever controls (or spoofs) the document aims tokengate's key fetches at internal
 * services. The `jwks_uri` must be on the issuer's origin unless the operator allowed
 * another origin for that issuer (`issuer add --jwks-origin`).
 */
interface DiscoveryServer {
  readonly origin: string
  readonly server: Server
  /** `jwks_uri` per issuer path (`/a` serves `/a/.well-known/openid-configuration`). */
  readonly jwksUris: Map<string, string>
  jwks: unknown
}

const DISCOVERY = /^(\/[a-z0-9-]+)\/\.well-known\/openid-configuration$/

async function startDiscoveryServer(): Promise<DiscoveryServer> {
  const state: DiscoveryServer = {
    origin: '',
    server: createServer((request, response) => {
      const tenantPath = DISCOVERY.exec(request.url ?? '')?.[1]
      const jwksUri = tenantPath === undefined ? undefined : state.jwksUris.get(tenantPath)
      if (jwksUri !== undefined) {
        response.writeHead(200, { 'content-type': 'application/json' })
        response.end(JSON.stringify({ issuer: `${state.origin}${tenantPath}`, jwks_uri: jwksUri }))
      } else if (request.url === '/jwks.json') {
        response.writeHead(200, { 'content-type': 'application/json' })
        response.end(JSON.stringify(state.jwks))
      } else response.writeHead(404).end()
    }),
    jwksUris: new Map(),
    jwks: { keys: [] },
  }
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve))
  Object.assign(state, {
    origin: `http://127.0.0.1:${(state.server.address() as AddressInfo).port}`,
  })
  return state
}

describe('discovery cannot aim tokengate at internal services (#11 item 9)', () => {
  let gate: Gate
  let idp: DiscoveryServer
  let internal: KeyServer
  const signers = new Map<string, ReturnType<typeof createTestIssuer>>()

  before(async () => {
    gate = await startGate()
    idp = await startDiscoveryServer()
    const keys = []
    for (const path of ['/attack', '/same', '/allowed']) {
      const signer = createTestIssuer({
        issuer: `${idp.origin}${path}`,
        audience: 'tokengate',
        fixed: 'demo',
        kid: path.slice(1),
      })
      signers.set(path, signer)
      keys.push(signer.publicJwk)
    }
    idp.jwks = { keys }
    // The "internal service" would even answer with the right keys: only the origin rule
    // stands between the document and a fetch to it.
    internal = await startKeyServer({ keys })
  })
  after(async () => {
    await gate.close()
    await internal.close()
    await new Promise((resolve) => idp.server.close(resolve))
  })

  /** Registers the issuer at `path` and calls /me with its token once the server knows it. */
  async function callAfterAdding(path: string, ...extra: string[]) {
    const issuer = `${idp.origin}${path}`
    const added = await gate.cli(
      'issuer',
      'add',
      '--issuer',
      issuer,
      '--audience',
      'tokengate',
      '--discovery',
      '--tenant',
      'demo',
      ...extra,
    )
    assert.equal(added.code, 0, added.stderr)
    const token = await (signers.get(path) as ReturnType<typeof createTestIssuer>).sign()
    let response = await gate.request('/api/v1/me', [...bearer(token), ...tenantHeader('demo')])
    await eventually(
      async () => {
        response = await gate.request('/api/v1/me', [...bearer(token), ...tenantHeader('demo')])
        return response.json.detail !== 'the token issuer is not trusted'
      },
      10_000,
      'the issuer to reach the server',
    )
    return response
  }

  it('a jwks_uri on another loopback port is refused, and that port receives no request', async () => {
    idp.jwksUris.set('/attack', `http://127.0.0.1:${new URL(internal.url).port}/admin/flush-cache`)
    const response = await callAfterAdding('/attack')
    assert.equal(response.status, 503, response.text)
    assert.equal(response.json.code, 'unavailable')
    assert.equal(internal.requests, 0)
  })

  it('a jwks_uri on the issuer origin is followed', async () => {
    idp.jwksUris.set('/same', `${idp.origin}/jwks.json`)
    const before = internal.requests
    const response = await callAfterAdding('/same')
    assert.equal(response.status, 200, response.text)
    assert.equal(internal.requests, before)
  })

  it('another origin is followed only when the operator allowed it for this issuer', async () => {
    idp.jwksUris.set('/allowed', internal.url)
    const response = await callAfterAdding(
      '/allowed',
      '--jwks-origin',
      new URL(internal.url).origin,
    )
    assert.equal(response.status, 200, response.text)
    assert.ok(internal.requests > 0)
  })
})
