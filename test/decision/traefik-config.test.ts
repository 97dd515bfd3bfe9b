/**
 * examples/forward-auth/traefik-dynamic.yml checked against Traefik's source, since no
 * Traefik binary can run here (test/decision/decision.test.ts sends the decision listener
 * exactly what forwardAuth sends). From traefik/traefik
 * fd5a576df2e8aeb0bfc8a96b6ef6e60a61f7ec0a:
 * - pkg/config/dynamic/middlewares.go: the fields of `ForwardAuth` (line 290) and `Headers`
 *   (line 350), by their json names;
 * - pkg/middlewares/auth/forward.go: on a 2xx, every request header whose canonical name
 *   (Go's http.CanonicalHeaderKey, which keeps `_`) matches authResponseHeadersRegex is
 *   deleted, then the answer's matching headers are copied;
 * - pkg/middlewares/headers/header.go: a preflight (OPTIONS + Origin +
 *   Access-Control-Request-Method) is answered by the headers middleware itself.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { parse } from 'yaml'
import { isSteering } from '../../src/http/spoofable-headers.ts'

const FORWARD_AUTH_FIELDS = new Set([
  'address',
  'tls',
  'trustForwardHeader',
  'authResponseHeaders',
  'authResponseHeadersRegex',
  'authRequestHeaders',
  'maxResponseBodySize',
  'addAuthCookiesToResponse',
  'headerField',
  'forwardBody',
  'maxBodySize',
  'preserveLocationHeader',
  'preserveRequestMethod',
  'authSigninURL',
])

const HEADERS_FIELDS = new Set([
  'customRequestHeaders',
  'customResponseHeaders',
  'accessControlAllowCredentials',
  'accessControlAllowHeaders',
  'accessControlAllowMethods',
  'accessControlAllowOriginList',
  'accessControlAllowOriginListRegex',
  'accessControlExposeHeaders',
  'accessControlMaxAge',
  'addVaryHeader',
])

/** Go's textproto.CanonicalMIMEHeaderKey: upper after start and `-`, lower elsewhere. */
function canonical(name: string): string {
  let upper = true
  let out = ''
  for (const c of name) {
    out += upper ? c.toUpperCase() : c.toLowerCase()
    upper = c === '-'
  }
  return out
}

interface Middleware {
  forwardAuth?: Record<string, unknown>
  headers?: Record<string, unknown>
}

const config = parse(
  readFileSync(
    join(import.meta.dirname, '../../examples/forward-auth/traefik-dynamic.yml'),
    'utf8',
  ),
) as {
  http: {
    routers: Record<string, { middlewares: string[] }>
    middlewares: Record<string, Middleware>
  }
}

describe('traefik-dynamic.yml against Traefik’s source', () => {
  const middlewares = config.http.middlewares
  const forwardAuth = middlewares.tokengate?.forwardAuth ?? {}

  test('every option is a field of ForwardAuth or Headers', () => {
    for (const middleware of Object.values(middlewares)) {
      for (const key of Object.keys(middleware.forwardAuth ?? {})) {
        assert.ok(FORWARD_AUTH_FIELDS.has(key), `forwardAuth.${key}`)
      }
      for (const key of Object.keys(middleware.headers ?? {})) {
        assert.ok(HEADERS_FIELDS.has(key), `headers.${key}`)
      }
    }
  })

  test('Traefik states the request itself and sends tokengate only what it reads', () => {
    assert.equal(forwardAuth.trustForwardHeader, false)
    assert.deepEqual(forwardAuth.authRequestHeaders, [
      'Authorization',
      'X-Tenant-Id',
      'X-Request-Id',
      'Cookie',
      // passTLSClientCert's, for certificate-bound tokens (the entry point drops a client's).
      'X-Forwarded-Tls-Client-Cert',
    ])
    assert.equal(forwardAuth.preserveRequestMethod, undefined, 'GET on the request line')
  })

  test('the response regex deletes every client spelling of an identity or steering header, nothing else', () => {
    const source = String(forwardAuth.authResponseHeadersRegex)
    assert.ok(source.startsWith('(?i)'))
    const regex = new RegExp(source.slice('(?i)'.length), 'i')
    const spellings = [
      'X-Auth-Tenant',
      'x_auth_tenant',
      'X-AUTH_PERMISSIONS',
      'X-Auth-Role',
      'X-Auth-Token',
      'X-HTTP-Method-Override',
      'x_http_method',
      'X-Method-Override',
      'X-Original-URL',
      'x_rewrite_url',
    ]
    for (const name of spellings) {
      assert.ok(isSteering(name), name)
      assert.ok(regex.test(canonical(name)), `${canonical(name)} is not deleted`)
    }
    for (const name of ['Authorization', 'X-Tenant-Id', 'X-Request-Id', 'X-Authority', 'Cookie']) {
      assert.ok(!regex.test(canonical(name)), `${name} would be deleted`)
    }
  })

  test('the CORS middleware runs first, so a preflight never reaches forwardAuth', () => {
    const chain = config.http.routers.api?.middlewares ?? []
    assert.ok(middlewares[chain[0] as string]?.headers?.accessControlAllowMethods)
    assert.ok(chain.indexOf('cors') < chain.indexOf('tokengate'))
  })
})
