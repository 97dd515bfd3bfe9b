/**
 * A real OpenID Provider (`oidc-provider`) on 127.0.0.1 for client-credentials grants of JWT
 * access tokens (RFC 9068 `at+jwt`, made by resource indicators): the HTTP host, the client and
 * feature settings, and the grant as a client makes it. The tests build their own `Provider`
 * (keys, claims) and hand it to `serve`.
 *
 * @example
 * const host = await startProviderHost()
 * const provider = new Provider(host.issuer, { jwks, clients: [clientCredentialsClient(id, secret)],
 *   features: clientCredentialsFeatures('urn:tokengate', () => info) })
 * host.serve(provider.callback())
 * const endpoint = await tokenEndpointOf(host.issuer)
 * const token = await clientCredentialsGrant(endpoint, { id, secret }, { resource: 'urn:tokengate' })
 */
import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createServer, type RequestListener } from 'node:http'
import { listenLocal } from './listen.ts'

export interface ProviderHost {
  /** `http://127.0.0.1:<port>`: the provider's issuer URL. */
  readonly issuer: string
  /** Answers every request with `listener` from now on (`provider.callback()`; a new key set: a new provider). */
  serve(listener: RequestListener): void
  close(): Promise<void>
}

export async function startProviderHost(): Promise<ProviderHost> {
  const server = createServer()
  const running = await listenLocal(server)
  return {
    issuer: running.url,
    serve(listener) {
      server.removeAllListeners('request')
      server.on('request', listener)
    },
    close: running.close,
  }
}

/** A confidential client allowed only the client-credentials grant (secret in Basic auth). */
export const clientCredentialsClient = (id: string, secret: string) => ({
  client_id: id,
  client_secret: secret,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  token_endpoint_auth_method: 'client_secret_basic',
})

/**
 * Features for client-credentials grants whose access tokens are JWTs: `info` describes each
 * requested resource (audience, scope, `accessTokenFormat: 'jwt'`, signing).
 */
export const clientCredentialsFeatures = (
  defaultResource: string,
  info: (resource: string) => Record<string, unknown>,
) => ({
  devInteractions: { enabled: false },
  clientCredentials: { enabled: true },
  resourceIndicators: {
    enabled: true,
    defaultResource: () => defaultResource,
    useGrantedResource: () => true,
    getResourceServerInfo: (_ctx: unknown, resource: string) => info(resource),
  },
})

/** The provider's token endpoint, from its discovery document. */
export async function tokenEndpointOf(issuer: string): Promise<string> {
  const discovery = await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()
  return (discovery as { token_endpoint: string }).token_endpoint
}

/** A real client-credentials grant at `tokenEndpoint`: the access token (asserted 200, Bearer). */
export async function clientCredentialsGrant(
  tokenEndpoint: string,
  client: { readonly id: string; readonly secret: string },
  request: { readonly resource: string; readonly scope?: string },
): Promise<string> {
  const basic = Buffer.from(`${client.id}:${client.secret}`).toString('base64')
  const response = await fetch(tokenEndpoint, {
    method: 'POST',
    headers: {
      authorization: `Basic ${basic}`,
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: new URLSearchParams({
      grant_type: 'client_credentials',
      resource: request.resource,
      scope: request.scope ?? 'tokens:read',
    }),
  })
  const body = (await response.json()) as Record<string, unknown>
  assert.equal(response.status, 200, JSON.stringify(body))
  assert.equal(body.token_type, 'Bearer')
  return body.access_token as string
}
