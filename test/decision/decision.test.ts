/**
 * The decision listener spoken to directly, as each proxy speaks to it: who may state the
 * original request, the Envoy path-prefix shape, refusals of ambiguous statements, and the
 * signed identity token with its JWKS.
 */
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import type { IncomingHttpHeaders } from 'node:http'
import { createConnection } from 'node:net'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { createLocalJWKSet, jwtVerify } from 'jose'
import { loadConfig } from '../../src/config/load.ts'
import { clientAddressFrom, readForwardedRequest } from '../../src/decision/forwarded-request.ts'
import { createProxyMatcher } from '../../src/decision/proxy-kinds.ts'
import { IDENTITY_HEADER_NAMES, IDENTITY_PREFIX } from '../../src/http/identity-headers.ts'
import { isSteering, STEERING_HEADERS } from '../../src/http/spoofable-headers.ts'
import { openStore } from '../../src/stores/open-store.ts'
import type { StoredAuditEvent } from '../../src/stores/store.ts'
import { PROTECTED_PATH, send } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { SPEC_POLICY, type Stack, startStack } from './harness.ts'

const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`]

// One decision listener, one proxy kind per loopback address (Linux routes all of 127/8 to
// the host): the requests below come from the address of the proxy they speak as.
const NGINX = '127.0.0.1'
const INGRESS = '127.0.0.2'
const CADDY = '127.0.0.3'
const TRAEFIK = '127.0.0.4'
const ENVOY = '127.0.0.5'
const PER_ADDRESS = [
  NGINX,
  `${INGRESS}=ingress-nginx`,
  `${CADDY}=caddy`,
  `${TRAEFIK}=traefik`,
  `${ENVOY}=envoy`,
]

/** The CORS part of a response's headers. */
const corsOf = (headers: IncomingHttpHeaders) =>
  Object.fromEntries(
    Object.entries(headers).filter(
      ([name]) => name.startsWith('access-control-') || name === 'vary',
    ),
  )

/** A request with exactly these header lines, from `localAddress`. */
async function sendFrom(
  localAddress: string,
  base: string,
  path: string,
  lines: readonly (readonly [string, string])[],
  method = 'GET',
) {
  const { status, headers, text } = await rawRequest(base, path, lines, method, { localAddress })
  return { status, headers, body: text }
}

describe('decision API: the original request is believed only from trusted proxies', () => {
  let trusting: Stack
  let distrusting: Stack
  before(async () => {
    trusting = await startStack({ proxy: 'nginx', trustedProxies: PER_ADDRESS })
    distrusting = await startStack({
      proxy: 'nginx',
      trustedProxies: ['10.9.9.9', '192.168.0.0/16'],
    })
  })
  after(async () => {
    await trusting?.close()
    await distrusting?.close()
  })

  for (const [family, from, method, uri] of [
    ['nginx', NGINX, 'X-Original-Method', 'X-Original-URI'],
    ['Caddy', CADDY, 'X-Forwarded-Method', 'X-Forwarded-Uri'],
  ] as const) {
    test(`${family}: a direct caller's ${uri} does not change what is decided`, async () => {
      // The token may not read /api/v1/things; the forged header claims another path.
      const lines: [string, string][] = [
        bearer(trusting.tokens.patWithoutPermission),
        [method, 'GET'],
        [uri, '/api/v1/elsewhere'],
      ]
      const fromProxy = await sendFrom(from, trusting.decisionUrl, PROTECTED_PATH, lines)
      assert.equal(fromProxy.status, 200, 'a trusted proxy states the original request')
      const forged = await send(
        distrusting.decisionUrl,
        PROTECTED_PATH,
        lines.map(([name, value]) =>
          name === 'Authorization'
            ? bearer(distrusting.tokens.patWithoutPermission)
            : [name, value],
        ),
      )
      assert.equal(forged.status, 403, forged.body)
      assert.equal(JSON.parse(forged.body).code, 'insufficient_permission')
    })
  }

  test('a trusted proxy must state the method with the URI, once each', async () => {
    const token = bearer(trusting.tokens.pat)
    for (const lines of [
      [token, ['X-Original-URI', PROTECTED_PATH]],
      [token, ['X-Forwarded-Method', 'GET']],
      [
        token,
        ['X-Original-Method', 'GET'],
        ['X-Original-URI', PROTECTED_PATH],
        ['X-Original-URI', '/api/v1/x'],
      ],
      [token, ['X-Original-Method', 'G ET'], ['X-Original-URI', PROTECTED_PATH]],
      [token, ['X-Original-Method', 'FOO'], ['X-Original-URI', PROTECTED_PATH]],
      [token, ['X-Original-Method', 'GET'], ['X-Original-URI', 'http://evil/api/v1/things']],
    ] as [string, string][][]) {
      const response = await send(trusting.decisionUrl, '/', lines)
      assert.equal(response.status, 400, JSON.stringify(lines.slice(1)))
      const body = JSON.parse(response.body)
      assert.equal(body.code, 'validation_failed')
      assert.equal(response.headers['x-request-id'], body.requestId)
    }
  })

  test('the original method is the one decided: HEAD, POST and WebDAV methods', async () => {
    for (const method of ['HEAD', 'POST', 'PROPFIND']) {
      const response = await send(trusting.decisionUrl, '/', [
        bearer(trusting.tokens.patWithoutPermission),
        ['X-Original-Method', method],
        ['X-Original-URI', PROTECTED_PATH],
      ])
      // The policy's rule covers GET (and so HEAD) only; other methods fall to the default.
      assert.equal(response.status, method === 'HEAD' ? 403 : 200, method)
      if (method === 'HEAD') assert.equal(JSON.parse(response.body).code, 'insufficient_permission')
    }
  })

  test('the answer to a proxy is 200 with the identity headers and no body', async () => {
    const response = await sendFrom(CADDY, trusting.decisionUrl, '/', [
      bearer(trusting.tokens.pat),
      ['X-Forwarded-Method', 'GET'],
      ['X-Forwarded-Uri', `${PROTECTED_PATH}?page=2`],
      ['X-Auth-Tenant', 'evil'],
    ])
    assert.equal(response.status, 200)
    assert.equal(response.body, '')
    assert.equal(response.headers['x-auth-tenant'], TEST_TENANT)
    assert.equal(response.headers['x-auth-subject'], 'ci-bot')
    assert.equal(response.headers['x-auth-token-type'], 'pat')
    assert.match(String(response.headers['x-auth-token-id']), /.+/)
    assert.equal(response.headers['x-auth-permissions'], 'things:read')
    assert.match(String(response.headers['x-request-id']), /.+/)
    assert.equal(response.headers['x-tokengate-problem'], undefined)
  })

  for (const [what, uri, status] of [
    ['an ambiguous path', '/api/v1/public/../internal/x', 400],
    ["another tenant's path segment", '/api/v1/tenants/tenant-b/files', 403],
    ['a deny rule', '/api/v1/internal/x', 404],
  ] as const) {
    test(`${what}: the gateway's answer (${status})`, async () => {
      const token = bearer(trusting.tokens.pat)
      const decided = await send(trusting.decisionUrl, '/', [
        token,
        ['X-Original-Method', 'GET'],
        ['X-Original-URI', uri],
      ])
      const direct = await send(trusting.gatewayUrl, uri, [token])
      assert.equal(direct.status, status)
      assert.equal(decided.status, status)
      const { requestId: _a, ...body } = JSON.parse(decided.body)
      const { requestId: _b, ...expected } = JSON.parse(direct.body)
      assert.deepEqual(body, expected)
      assert.equal(decided.headers['www-authenticate'], direct.headers['www-authenticate'])
      assert.equal(decided.headers['cache-control'], direct.headers['cache-control'])
    })
  }

  test('a refusal is audited with the original method, path and the real client address', async () => {
    const response = await send(trusting.decisionUrl, '/', [
      bearer(trusting.tokens.patWithoutPermission),
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', `${PROTECTED_PATH}?page=3`],
      ['X-Forwarded-For', '203.0.113.9'],
    ])
    assert.equal(response.status, 403)
    const requestId = JSON.parse(response.body).requestId
    const store = await openStore({ dataDir: trusting.dataDir })
    try {
      let event: StoredAuditEvent | undefined
      for (let i = 0; i < 50 && !event; i++) {
        await sleep(100)
        const page = await store.listAudit(TEST_TENANT, { limit: 200 })
        event = page.items.find((item) => item.requestId === requestId)
      }
      assert.ok(event, 'no audit event for the refusal')
      assert.equal(event.type, 'auth.forbidden')
      assert.equal(event.outcome, 'insufficient_permission')
      assert.equal(event.clientAddress, '203.0.113.9')
      assert.deepEqual(event.details, { method: 'GET', path: PROTECTED_PATH, policyLine: 3 })
    } finally {
      await store.close()
    }
  })

  test('a token also in the original URI as ?access_token → 400 invalid_request, as the API port answers', async () => {
    const response = await send(trusting.decisionUrl, '/', [
      bearer(trusting.tokens.pat),
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', `${PROTECTED_PATH}?access_token=${trusting.tokens.pat}`],
    ])
    assert.equal(response.status, 400)
    assert.equal(JSON.parse(response.body).code, 'invalid_request')
    assert.match(String(response.headers['www-authenticate']), /error="invalid_request"/)
  })

  test('paths outside /api/v1 are 404 without authentication, as on the API port', async () => {
    const response = await send(trusting.decisionUrl, '/', [
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', '/static/app.js'],
    ])
    assert.equal(response.status, 404)
    assert.equal(JSON.parse(response.body).code, 'not_found')
  })

  test('a refusal to nginx carries its problem body in X-Tokengate-Problem; to others not', async () => {
    const nginx = await send(trusting.decisionUrl, '/', [
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', PROTECTED_PATH],
    ])
    assert.equal(nginx.status, 401)
    assert.deepEqual(
      JSON.parse(String(nginx.headers['x-tokengate-problem'])),
      JSON.parse(nginx.body),
    )
    const caddy = await sendFrom(CADDY, trusting.decisionUrl, '/', [
      ['X-Forwarded-Method', 'GET'],
      ['X-Forwarded-Uri', PROTECTED_PATH],
    ])
    assert.equal(caddy.status, 401)
    assert.equal(caddy.headers['x-tokengate-problem'], undefined)
  })
})

describe('decision API: each proxy kind believes its own header family, never another', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({
      proxy: 'nginx',
      trustedProxies: PER_ADDRESS,
      corsOrigins: 'https://app.example',
    })
  })
  after(() => stack?.close())

  const ALLOWED = '/api/v1/status'
  const DENIED = '/api/v1/internal/secret'
  /** Every family at once, the kind's own stating `own`, every other one `other`. */
  const everyFamily = (kind: string, own: string, other: string): [string, string][] => {
    const path = (family: string) => (family === kind ? own : other)
    return [
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', path('nginx')],
      ['X-Original-URL', `https://api.example${path('ingress-nginx')}`],
      ['X-Forwarded-Method', 'GET'],
      ['X-Forwarded-Uri', path(kind === 'traefik' ? 'traefik' : 'caddy')],
    ]
  }

  for (const [kind, from] of [
    ['nginx', NGINX],
    ['ingress-nginx', INGRESS],
    ['caddy', CADDY],
    ['traefik', TRAEFIK],
  ] as const) {
    test(`${kind}: exactly its own family decides, whatever else the client added`, async () => {
      const token = bearer(stack.tokens.pat)
      const allowed = await sendFrom(from, stack.decisionUrl, DENIED, [
        token,
        ...everyFamily(kind, ALLOWED, DENIED),
      ])
      assert.equal(allowed.status, 200, allowed.body)
      const denied = await sendFrom(from, stack.decisionUrl, ALLOWED, [
        token,
        ...everyFamily(kind, DENIED, ALLOWED),
      ])
      assert.equal(denied.status, 404, denied.body)
      assert.equal(JSON.parse(denied.body).code, 'not_found')
    })
  }

  test('envoy: the request line decides, whatever headers state', async () => {
    const token = bearer(stack.tokens.pat)
    const allowed = await sendFrom(ENVOY, stack.decisionUrl, ALLOWED, [
      token,
      ...everyFamily('envoy', DENIED, DENIED),
    ])
    assert.equal(allowed.status, 200, allowed.body)
    const denied = await sendFrom(ENVOY, stack.decisionUrl, DENIED, [
      token,
      ...everyFamily('envoy', ALLOWED, ALLOWED),
    ])
    assert.equal(denied.status, 404)
  })

  test("a kind's family given half is refused, even when another family is complete", async () => {
    const response = await sendFrom(INGRESS, stack.decisionUrl, '/', [
      bearer(stack.tokens.pat),
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', ALLOWED],
    ])
    assert.equal(response.status, 400)
    assert.equal(JSON.parse(response.body).code, 'validation_failed')
  })

  // What Traefik's forwardAuth sends (traefik/traefik fd5a576, pkg/middlewares/auth/forward.go,
  // writeHeader with trustForwardHeader: false): GET on the configured address, the client's
  // headers (only those in authRequestHeaders, when set), X-Forwarded-* of Traefik's own,
  // X-Forwarded-Uri = the request URI.
  const traefikAsks = (
    method: string,
    uri: string,
    client: [string, string][],
  ): [string, string][] => [
    ...client,
    ['X-Forwarded-For', '203.0.113.7'],
    ['X-Forwarded-Method', method],
    ['X-Forwarded-Proto', 'https'],
    ['X-Forwarded-Port', '443'],
    ['X-Forwarded-Host', 'api.example.com'],
    ['X-Forwarded-Uri', uri],
  ]

  test('traefik: the request as forwardAuth states it is decided, with the identity answered', async () => {
    const ok = await sendFrom(
      TRAEFIK,
      stack.decisionUrl,
      '/',
      traefikAsks('GET', `${PROTECTED_PATH}?page=2`, [bearer(stack.tokens.pat)]),
    )
    assert.equal(ok.status, 200, ok.body)
    assert.equal(ok.headers['x-auth-tenant'], TEST_TENANT)
    assert.equal(ok.headers['x-tokengate-problem'], undefined)
    const refused = await sendFrom(
      TRAEFIK,
      stack.decisionUrl,
      '/',
      traefikAsks('DELETE', '/api/v1/projects/1', [bearer(stack.readerPat)]),
    )
    assert.equal(refused.status, 403)
    assert.equal(JSON.parse(refused.body).code, 'insufficient_permission')
    assert.equal(refused.headers['x-tokengate-problem'], undefined, 'Traefik relays the body')
  })

  test('traefik: a preflight is decided like any request, never answered 2xx', async () => {
    const preflight: [string, string][] = [
      ['Origin', 'https://app.example'],
      ['Access-Control-Request-Method', 'DELETE'],
    ]
    // GET on the request line, and OPTIONS there too (forwardAuth's preserveRequestMethod).
    for (const method of ['GET', 'OPTIONS']) {
      const response = await sendFrom(
        TRAEFIK,
        stack.decisionUrl,
        '/',
        traefikAsks('OPTIONS', DENIED, preflight),
        method,
      )
      assert.equal(response.status, 401, method)
    }
  })

  test('traefik: what its authResponseHeadersRegex strips may arrive; other client headers may not', async () => {
    const token = bearer(stack.tokens.pat)
    for (const client of [
      ['X-Auth-Tenant', 'tenant-b'],
      ['X-Http-Method-Override', 'DELETE'],
    ] as [string, string][]) {
      const overwritten = await sendFrom(
        TRAEFIK,
        stack.decisionUrl,
        '/',
        traefikAsks('GET', ALLOWED, [token, client]),
      )
      assert.equal(overwritten.status, 200, client[0])
    }
    for (const client of [
      ['X_Auth_Tenant', 'tenant-b'],
      ['X_Http_Method_Override', 'DELETE'],
      ['Cookie', 'theme=dark; __Host-tokengate-admin=s3cr3t'],
    ] as [string, string][]) {
      const response = await sendFrom(
        TRAEFIK,
        stack.decisionUrl,
        '/',
        traefikAsks('GET', ALLOWED, [token, client]),
      )
      assert.equal(response.status, 400, client[0])
      assert.equal(JSON.parse(response.body).code, 'validation_failed')
    }
  })

  test('a preflight on the request line is answered as the API port answers it, where the kind allows', async () => {
    const preflight: [string, string][] = [
      ['Origin', 'https://app.example'],
      ['Access-Control-Request-Method', 'DELETE'],
      ['X-Original-Method', 'OPTIONS'],
      ['X-Original-URI', DENIED],
      ['X-Forwarded-Method', 'OPTIONS'],
      ['X-Forwarded-Uri', DENIED],
    ]
    for (const [from, status] of [
      [NGINX, 204],
      [CADDY, 204],
      [ENVOY, 204],
      [INGRESS, 400],
      [TRAEFIK, 401],
    ] as const) {
      const response = await sendFrom(from, stack.decisionUrl, DENIED, preflight, 'OPTIONS')
      assert.equal(response.status, status, from)
      const api = await sendFrom(NGINX, stack.gatewayUrl, DENIED, preflight, 'OPTIONS')
      if (status === 204) assert.deepEqual(corsOf(response.headers), corsOf(api.headers))
    }
  })
})

describe("decision API: the client address is the proxy's word too", () => {
  let trusting: Stack
  let distrusting: Stack
  before(async () => {
    trusting = await startStack({ failedAuthMax: 2 })
    distrusting = await startStack({ failedAuthMax: 2, trustedProxies: ['10.9.9.9'] })
  })
  after(async () => {
    await trusting?.close()
    await distrusting?.close()
  })

  const failThrice = async (stack: Stack) => {
    const statuses: number[] = []
    for (const client of ['203.0.113.1', '203.0.113.2', '203.0.113.3']) {
      const response = await send(stack.decisionUrl, PROTECTED_PATH, [
        bearer('not-a-token'),
        ['X-Forwarded-For', client],
      ])
      statuses.push(response.status)
    }
    return statuses
  }

  test('a direct caller cannot dodge the failed-authentication limit with X-Forwarded-For', async () => {
    assert.deepEqual(await failThrice(distrusting), [401, 401, 429])
  })

  test("a trusted proxy's X-Forwarded-For keys the limit per real client", async () => {
    assert.deepEqual(await failThrice(trusting), [401, 401, 401])
  })
})

describe('decision API: Envoy ext_authz (HTTP service, path_prefix)', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({ proxy: 'envoy', pathPrefix: '/ext-authz' })
  })
  after(() => stack?.close())

  test('the original path follows the prefix on the request line', async () => {
    const ok = await send(stack.decisionUrl, `/ext-authz${PROTECTED_PATH}`, [
      bearer(stack.tokens.pat),
    ])
    assert.equal(ok.status, 200, ok.body)
    assert.equal(ok.headers['x-auth-tenant'], TEST_TENANT)
    const refused = await send(stack.decisionUrl, `/ext-authz${PROTECTED_PATH}`, [
      bearer(stack.tokens.patWithoutPermission),
    ])
    assert.equal(refused.status, 403)
    assert.match(String(refused.headers['www-authenticate']), /insufficient_scope/)
  })

  test("the answer names every other spelling of the client's identity and steering headers for removal", async () => {
    const response = await send(stack.decisionUrl, '/ext-authz/api/v1/status', [
      bearer(stack.tokens.pat),
      ['x-auth-tenant', 'tenant-b'],
      ['x_auth_tenant', 'tenant-b'],
      ['x-http-method-override', 'DELETE'],
      ['cookie', 'theme=dark; __Host-tokengate-admin=s3cr3t'],
    ])
    assert.equal(response.status, 200)
    assert.equal(response.headers['x-auth-tenant'], TEST_TENANT, 'replaced, not removed')
    assert.equal(
      response.headers['x-envoy-auth-headers-to-remove'],
      'x_auth_tenant, x-http-method-override',
    )
    assert.equal(response.headers.cookie, 'theme=dark')
    const plain = await send(stack.decisionUrl, '/ext-authz/api/v1/status', [
      bearer(stack.tokens.pat),
    ])
    assert.equal(plain.headers['x-envoy-auth-headers-to-remove'], undefined)
    assert.equal(plain.headers.cookie, undefined)
  })

  test('a path without the prefix is refused', async () => {
    const response = await send(stack.decisionUrl, PROTECTED_PATH, [bearer(stack.tokens.pat)])
    assert.equal(response.status, 400)
  })
  // The listener skips the stream life cycle of a bodyless ask (optimizeEmptyRequests): an ask
  // with a body (Envoy's with_request_body) must still be read to its end, never as a request.
  test('an ask with a body, by length or chunked, is drained: the next ask on its connection is answered', async () => {
    const { port } = new URL(stack.decisionUrl)
    const socket = createConnection({ host: '127.0.0.1', port: Number(port) })
    await once(socket, 'connect')
    let received = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => {
      received += chunk
    })
    const answers = async (n: number) => {
      for (let i = 0; i < 100 && received.split('\r\n\r\n').length - 1 < n; i++) await sleep(20)
      return [...received.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => Number(m[1]))
    }
    const head = (method: string, lines: string[]) =>
      [
        `${method} /ext-authz${PROTECTED_PATH} HTTP/1.1`,
        'Host: decision',
        `Authorization: Bearer ${stack.tokens.pat}`,
        ...lines,
        '',
        '',
      ].join('\r\n')
    // A body that would be a request of its own if it were parsed as one.
    const smuggled = `GET /ext-authz/admin HTTP/1.1\r\nHost: x\r\n\r\n${'x'.repeat(256 * 1024)}`
    socket.write(head('POST', [`Content-Length: ${Buffer.byteLength(smuggled)}`]) + smuggled)
    assert.deepEqual(await answers(1), [200])
    const chunk = Buffer.byteLength(smuggled).toString(16)
    socket.write(
      `${head('POST', ['Transfer-Encoding: chunked'])}${chunk}\r\n${smuggled}\r\n0\r\n\r\n`,
    )
    assert.deepEqual(await answers(2), [200, 200])
    socket.write(head('GET', []))
    assert.deepEqual(await answers(3), [200, 200, 200], received.slice(0, 2000))
    socket.destroy()
  })
})

describe('decision API + gateway: signed identity token', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({ proxy: 'nginx', identityToken: true })
  })
  after(() => stack?.close())

  test('the decision and the gateway both send a JWT that verifies against the JWKS of the API listener', async () => {
    const decision = await send(stack.decisionUrl, '/', [
      bearer(stack.tokens.pat),
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', PROTECTED_PATH],
    ])
    assert.equal(decision.status, 200)
    await send(stack.gatewayUrl, PROTECTED_PATH, [
      bearer(stack.tokens.pat),
      ['X-Auth-Token', 'forged'],
    ])
    const upstreamToken = stack.upstream.seen.at(-1)?.headers['x-auth-token']
    // On the API listener only: on the decision listener a route answering 200 would be an
    // "allowed" decision for that path, letting a proxy pass it upstream unauthenticated.
    const asked = await send(stack.decisionUrl, '/.well-known/jwks.json', [
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', '/.well-known/jwks.json'],
    ])
    assert.equal(asked.status, 404)
    for (const base of [stack.gatewayUrl]) {
      const jwks = JSON.parse((await send(base, '/.well-known/jwks.json', [])).body)
      assert.equal(jwks.keys.length, 1)
      assert.equal(jwks.keys[0].d, undefined, 'never a private key')
      for (const token of [decision.headers['x-auth-token'], upstreamToken]) {
        const { payload, protectedHeader } = await jwtVerify(
          String(token),
          createLocalJWKSet(jwks),
          {
            issuer: 'tokengate',
            audience: token === upstreamToken ? stack.upstream.url : stack.decisionUrl,
          },
        )
        assert.equal(protectedHeader.alg, 'ES256')
        assert.equal(payload.sub, 'ci-bot')
        assert.equal(payload.tenant_id, TEST_TENANT)
        assert.equal(payload.token_type, 'pat')
        assert.deepEqual(payload.permissions, ['things:read'])
        assert.ok((payload.exp as number) - (payload.iat as number) <= 60)
      }
    }
  })
})

describe('trusted proxy addresses', () => {
  test('addresses, CIDR blocks and IPv4-mapped peers, each with its proxy kind', () => {
    const trusted = createProxyMatcher({
      proxy: 'nginx',
      trustedProxies: ['127.0.0.1', '10.0.0.0/8=ingress-nginx', 'fd00::/8=envoy'],
    })
    assert.equal(trusted('127.0.0.1'), 'nginx')
    assert.equal(trusted('::ffff:127.0.0.1'), 'nginx')
    assert.equal(trusted('10.200.1.1'), 'ingress-nginx')
    assert.equal(trusted('fd12::1'), 'envoy')
    assert.equal(trusted('127.0.0.2'), undefined)
    assert.equal(trusted(undefined), undefined)
  })

  test('asked in turn about the same and other addresses, each answer is its own', () => {
    // The matcher keeps its last answer (the X-Forwarded-For hop repeats): never another's.
    const trusted = createProxyMatcher({
      proxy: 'nginx',
      trustedProxies: ['127.0.0.1', '10.0.0.0/8=ingress-nginx'],
    })
    const asked: [string | undefined, string | undefined][] = [
      ['127.0.0.1', 'nginx'],
      ['127.0.0.1', 'nginx'],
      ['127.0.0.2', undefined],
      ['127.0.0.2', undefined],
      ['::ffff:127.0.0.1', 'nginx'],
      ['10.0.0.9', 'ingress-nginx'],
      ['', undefined],
      ['10.0.0.9', 'ingress-nginx'],
      [undefined, undefined],
      ['127.0.0.1', 'nginx'],
      ['203.0.113.7', undefined],
      ['127.0.0.1', 'nginx'],
    ]
    for (const [i, [address, kind]] of asked.entries()) {
      assert.equal(trusted(address), kind, `ask ${i}: ${address}`)
    }
  })

  test('nginx: the origin is stated by one X-Forwarded-Proto and one X-Forwarded-Host', () => {
    const read = (extra: string[]) =>
      readForwardedRequest(
        ['X-Original-Method', 'get', 'X-Original-URI', '/api/v1/a', ...extra],
        { method: 'GET', url: '/_tokengate' },
        { kind: 'nginx', pathPrefix: '' },
      )
    const proto = ['X-Forwarded-Proto', 'HTTPS']
    const host = ['x-forwarded-host', 'API.example.com:8443']
    assert.deepEqual(read([...proto, ...host]), {
      ok: true,
      method: 'GET',
      url: '/api/v1/a',
      origin: 'https://api.example.com:8443',
    })
    for (const extra of [
      [...proto, ...host, ...host],
      [...proto, ...proto, ...host],
      host,
      proto,
      ['X-Forwarded-Proto', '', ...host],
      ['X-Forwarded-Proto', 'ftp', ...host],
      [...proto, 'X-Forwarded-Host', 'a/b'],
    ]) {
      const stated = read(extra)
      assert.equal(stated.ok && stated.origin, undefined, extra.join(' '))
    }
    // The URI and the method: exactly one each, or the statement is refused.
    for (const headers of [
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', '/api/v1/a'],
      ['X-Original-Method', 'GET', 'X-Original-URI', '/api/v1/a', 'x-original-uri', '/api/v1/b'],
      ['X-Original-Method', 'GET', 'X-Original-Method', 'GET', 'X-Original-URI', '/api/v1/a'],
    ]) {
      const stated = readForwardedRequest(
        headers,
        { method: 'GET', url: '/api/v1/a' },
        { kind: 'nginx', pathPrefix: '' },
      )
      assert.deepEqual(
        stated,
        { ok: false, reason: 'send exactly one x-original-uri and one x-original-method header' },
        headers.join(' '),
      )
    }
  })

  test('steering headers are found in every spelling, and only they', () => {
    // The rule spelled out slowly: lower-cased, `_` read as `-`, an identity header or a
    // steering name. isSteering's shortcuts must agree on every name.
    const slow = (name: string) => {
      const effective = name.toLowerCase().replaceAll('_', '-')
      return effective.startsWith(IDENTITY_PREFIX) || STEERING_HEADERS.includes(effective)
    }
    const names = new Set<string>()
    for (const base of [
      ...STEERING_HEADERS,
      ...IDENTITY_HEADER_NAMES,
      'x-auth-',
      'x-auth',
      'x-original-uri',
      'x-original-method',
      'x-forwarded-for',
      'x-forwarded-host',
      'x-ssl-client-cert',
      'x-request-id',
      'x-tenant-id',
      'authorization',
      'x',
      'x-',
      'xa',
      'x@uth-a',
    ]) {
      for (const name of [base, base.toUpperCase(), base.replaceAll('-', '_')]) {
        names.add(name)
        names.add(name.slice(0, -1))
        names.add(`${name}x`)
        // The two characters Unicode lower-cases into ASCII (`İ` to `i` and a combining dot).
        names.add(name.replace(/[ik]/i, '\u0130'))
        names.add(name.replace(/[ik]/i, '\u212a'))
        names.add(`${name}\u212a`)
        // A character one bit away from `-` (CR is 0x0d, `-` 0x2d) in place of the last one.
        names.add(name.replace(/[-_]([^-_]*)$/, '\r$1'))
      }
    }
    let steering = 0
    for (const name of names) {
      assert.equal(isSteering(name), slow(name), name)
      if (slow(name)) steering++
    }
    assert.ok(steering > STEERING_HEADERS.length * 3, 'the corpus holds steering names')
  })

  test('a bad entry or an entry without a kind is named by its config path at load', () => {
    const load = (decision: Record<string, unknown>) =>
      loadConfig({ env: {}, overrides: { server: { plainHttp: true }, decision } })
    for (const [entry, error] of [
      ['localhost', /\/decision\/trustedProxies\/1: not an address or CIDR block: "localhost"/],
      ['10.0.0.0/33', /\/decision\/trustedProxies\/1: not an address/],
      ['10.0.0.1/x', /\/decision\/trustedProxies\/1: not an address/],
      ['10.0.0.1=haproxy', /\/decision\/trustedProxies\/1: "haproxy" is not one of/],
    ] as const) {
      assert.throws(() => load({ proxy: 'nginx', trustedProxies: ['::1', entry] }), error)
    }
    assert.throws(
      () => load({ trustedProxies: ['127.0.0.1'] }),
      /\/decision\/trustedProxies\/0: say which proxy asks from 127\.0\.0\.1: set decision\.proxy/,
    )
    assert.doesNotThrow(() => load({ trustedProxies: ['127.0.0.1=caddy'] }))
  })

  test('one address of two kinds stops the start', () => {
    for (const list of [
      ['10.0.0.0/8=nginx', '10.1.2.3=caddy'],
      ['10.1.0.0/16=caddy', '10.0.0.0/8=nginx'],
    ]) {
      assert.throws(() => createProxyMatcher({ proxy: 'nginx', trustedProxies: list }), /both/)
    }
    assert.equal(
      createProxyMatcher({ proxy: undefined, trustedProxies: ['127.0.0.1=caddy'] })('127.0.0.1'),
      'caddy',
    )
  })

  test('each origin is read from its own proto and host, whatever was read before it', () => {
    const origin = (proto: string, host: string) => {
      const read = readForwardedRequest(
        ['X-Original-Method', 'GET', 'X-Original-URI', '/api/v1/a'].concat([
          'X-Forwarded-Proto',
          proto,
          'X-Forwarded-Host',
          host,
        ]),
        { method: 'GET', url: '/_tokengate' },
        { kind: 'nginx', pathPrefix: '' },
      )
      return read.ok ? read.origin : 'refused'
    }
    // Repeats, a change of either value, and an implausible value in between.
    const asked: ReadonlyArray<readonly [string, string, string | undefined]> = [
      ['https', 'a.example', 'https://a.example'],
      ['https', 'a.example', 'https://a.example'],
      ['http', 'a.example', 'http://a.example'],
      ['http', 'a.example', 'http://a.example'],
      ['http', 'b.example', 'http://b.example'],
      ['http', 'b/example', undefined],
      ['http', 'b/example', undefined],
      ['HTTP', 'B.Example', 'http://b.example'],
      ['ftp', 'B.Example', undefined],
      ['https', 'a.example', 'https://a.example'],
    ]
    for (const [i, [proto, host, expected]] of asked.entries()) {
      assert.equal(origin(proto, host), expected, `ask ${i}: ${proto} ${host}`)
    }
  })

  test('the client address: the nearest X-Forwarded-For hop that is no trusted proxy', () => {
    const trusted = createProxyMatcher({ proxy: 'nginx', trustedProxies: ['10.0.0.0/8'] })
    // The rule written out slowly, for every list of hops below.
    const slow = (peer: string, peerTrusted: boolean, header: string | undefined) => {
      if (!peerTrusted) return peer
      const hops = (header ?? '')
        .split(',')
        .map((hop) => hop.trim())
        .filter((hop) => hop !== '')
      let address = peer
      for (const hop of hops.reverse()) {
        address = hop
        if (trusted(hop) === undefined) break
      }
      return address
    }
    const hops = ['', ' ', '203.0.113.7', ' 198.51.100.2 ', '10.1.2.3', '10.9.9.9 ']
    const headers: Array<string | undefined> = [undefined]
    for (const a of hops) {
      headers.push(a)
      for (const b of hops) {
        headers.push(`${a},${b}`)
        for (const c of hops) headers.push(`${a},${b},${c}`)
      }
    }
    for (const peerTrusted of [true, false]) {
      for (const header of headers) {
        assert.equal(
          clientAddressFrom('10.0.0.1', peerTrusted, header, trusted),
          slow('10.0.0.1', peerTrusted, header),
          `${peerTrusted} ${JSON.stringify(header)}`,
        )
      }
    }
  })

  test('ingress-nginx: X-Original-URL stands for the URI, its spelling kept for the policy', () => {
    const read = readForwardedRequest(
      ['X-Original-Method', 'GET', 'X-Original-URL', 'https://api.example.com/api/v1/a/../b?x=1'],
      { method: 'GET', url: '/' },
      { kind: 'ingress-nginx', pathPrefix: '' },
    )
    assert.deepEqual(read, {
      ok: true,
      method: 'GET',
      url: '/api/v1/a/../b?x=1',
      origin: 'https://api.example.com',
    })
  })

  test('ingress-nginx: an X-Original-URL whose host would hide the path is refused', () => {
    for (const url of ['http://a?b/api/v1/x', 'http://a#b/api/v1/x', '/api/v1/x', 'ftp://a/x']) {
      const read = readForwardedRequest(
        ['X-Original-Method', 'GET', 'X-Original-URL', url],
        { method: 'GET', url: '/' },
        { kind: 'ingress-nginx', pathPrefix: '' },
      )
      assert.equal(read.ok, false, url)
    }
  })

  test('an untrusted peer is decided on its request line', () => {
    const read = readForwardedRequest(
      ['X-Original-URI', '/api/v1/a', 'X-Original-Method', 'POST'],
      { method: 'GET', url: '/api/v1/b' },
      { kind: undefined, pathPrefix: '' },
    )
    assert.deepEqual(read, { ok: true, method: 'GET', url: '/api/v1/b', origin: undefined })
  })
})

describe('decision API: policy reload on SIGHUP', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack()
  })
  after(async () => {
    await stack?.close()
  })

  test('a policy file edited and signalled decides the next request; a broken edit keeps it', async () => {
    const token = bearer(stack.tokens.pat)
    const reports = '/api/v1/reports/q3'
    assert.equal((await send(stack.decisionUrl, reports, [token])).status, 200)
    const policyFile = join(stack.dataDir, 'policy.yaml')
    writeFileSync(
      policyFile,
      `${SPEC_POLICY}  - methods: '*'\n    path: /api/v1/reports/*\n    deny: true\n`,
    )
    stack.running.signal('SIGHUP')
    let status = 0
    for (let i = 0; i < 100 && status !== 404; i++) {
      status = (await send(stack.decisionUrl, reports, [token])).status
      if (status !== 404) await sleep(50)
    }
    assert.equal(status, 404, 'the deny rule is in force')
    writeFileSync(policyFile, 'rules:\n  - methods: [get]\n    path: /api/v1/reports/*\n')
    stack.running.signal('SIGHUP')
    await sleep(500)
    assert.equal((await send(stack.decisionUrl, reports, [token])).status, 404, 'last good policy')
  })
})

describe('decision API: metrics', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({ metrics: true })
  })
  after(async () => {
    await stack?.close()
  })

  test("each decision is counted by outcome, apart from the API listener's requests", async () => {
    const scrape = async () => (await fetch(stack.running.metricsUrl as string)).text()
    const count = (text: string, labels: string) =>
      Number(
        text
          .split('\n')
          .find((line) => line.startsWith(`tokengate_decisions_total{${labels}}`))
          ?.split(' ')
          .at(-1) ?? 0,
      )
    const before = await scrape()
    assert.equal(
      (await send(stack.decisionUrl, PROTECTED_PATH, [bearer(stack.tokens.pat)])).status,
      200,
    )
    assert.equal((await send(stack.decisionUrl, PROTECTED_PATH, [])).status, 401)
    const denied = [bearer(stack.tokens.patWithoutPermission)]
    assert.equal((await send(stack.decisionUrl, PROTECTED_PATH, denied)).status, 403)
    const after = await scrape()
    assert.equal(
      count(after, 'code="ok",status="200"') - count(before, 'code="ok",status="200"'),
      1,
    )
    const missing = 'code="missing_authorization",status="401"'
    assert.equal(count(after, missing) - count(before, missing), 1)
    const forbidden = 'code="insufficient_permission",status="403"'
    assert.equal(count(after, forbidden) - count(before, forbidden), 1)
  })
})
