/**
 * Issue #23's red team, as raw requests from a hostile client through the real proxies
 * configured exactly as shipped (examples/forward-auth/: nginx.conf and the Caddyfile, and
 * nginx as ingress-nginx generates it for ingress-nginx.yaml), and through tokengate's own
 * gateway: nothing a client spells may change what is decided, or reach the upstream as
 * identity.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import { rawRequest } from '../gateway/raw-request.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { skipReason } from '../helpers/services.ts'
import {
  type ProxyProcess,
  type Stack,
  startCaddy,
  startIngressNginx,
  startNginx,
  startStack,
} from './harness.ts'

type Header = readonly [string, string]

const APP_ORIGIN = 'https://app.example'
const ALLOWED = '/api/v1/status'
const IDENTITY = new Set([
  'x-auth-tenant',
  'x-auth-subject',
  'x-auth-token-type',
  'x-auth-token-id',
  'x-auth-permissions',
  'x-auth-token',
])
const STEERING = new Set([
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
  'x-original-url',
  'x-rewrite-url',
])
const SESSION_COOKIE = '__Host-tokengate-admin'
/** The console's pending sign-in cookie: state, nonce and PKCE verifier for 10 minutes. */
const SIGN_IN_COOKIE = '__Host-tokengate-sso'

/** A header name as a CGI/WSGI/Rack upstream reads it. */
const effective = (name: string) => name.toLowerCase().replaceAll('_', '-')

const PROXIES: Record<
  string,
  {
    readonly binary: 'nginx' | 'nginx-lua' | 'caddy'
    readonly start: (ports: { decision: number; upstream: number }) => Promise<ProxyProcess>
    /** The decision.proxy tokengate is told of, when not the row's name. */
    readonly decides?: string
  }
> = {
  nginx: { binary: 'nginx', start: startNginx },
  caddy: { binary: 'caddy', start: startCaddy },
  'ingress-nginx': { binary: 'nginx', start: startIngressNginx },
  // examples/forward-auth/nginx-lua.conf: the same defences with decisions kept in Lua.
  'nginx (Lua cache)': {
    binary: 'nginx-lua',
    start: (ports) => startNginx(ports, { lua: true }),
    decides: 'nginx',
  },
}

for (const [proxy, { binary, start, decides }] of Object.entries(PROXIES)) {
  describe(`red team through ${proxy}`, { skip: skipReason(binary) }, () => {
    let stack: Stack
    let front: ProxyProcess
    before(async () => {
      stack = await startStack({
        proxy: decides ?? proxy,
        corsOrigins: APP_ORIGIN,
        identityToken: true,
      })
      front = await start({ decision: stack.decisionPort, upstream: stack.upstream.port })
    })
    after(async () => {
      await front?.stop()
      await stack?.close()
    })

    /** Sends through the proxy; resolves with the response and what the upstream saw. */
    const through = async (method: string, path: string, headers: readonly Header[]) => {
      const seenBefore = stack.upstream.seen.length
      const response = await rawRequest(front.url, path, headers, method)
      const seen = stack.upstream.seen.slice(seenBefore)
      assert.ok(seen.length <= 1, 'one request, one upstream request at most')
      return { response, upstream: seen[0] }
    }

    const targets = () =>
      [
        ['a deny rule', 'DELETE', '/api/v1/internal/secret', stack.tokens.pat],
        ['a permission the token lacks', 'DELETE', '/api/v1/projects/1', stack.readerPat],
        ["another tenant's path", 'GET', '/api/v1/tenants/tenant-b/files', stack.tokens.pat],
      ] as const

    const statements: [string, (front: string) => Header[]][] = [
      [
        'X-Original-Method + X-Original-URI',
        () => [
          ['X-Original-Method', 'GET'],
          ['X-Original-URI', ALLOWED],
        ],
      ],
      [
        'X-Original-Method + X-Original-URL',
        (url) => [
          ['X-Original-Method', 'GET'],
          ['X-Original-URL', `${url}${ALLOWED}`],
        ],
      ],
      [
        'X-Forwarded-Method + X-Forwarded-Uri',
        () => [
          ['X-Forwarded-Method', 'GET'],
          ['X-Forwarded-Uri', ALLOWED],
        ],
      ],
    ]

    for (const [family, statement] of statements) {
      test(`a client's own ${family} does not change what is decided`, async () => {
        for (const [what, method, path, token] of targets()) {
          const lines: Header[] = [['Authorization', `Bearer ${token}`], ...statement(front.url)]
          const direct = await rawRequest(stack.gatewayUrl, path, lines, method)
          assert.ok(direct.status >= 400, `${what}: the gateway refuses it (${direct.status})`)
          const { response, upstream } = await through(method, path, lines)
          assert.equal(upstream, undefined, `${what}: ${method} ${path} reached the upstream`)
          if (proxy !== 'ingress-nginx') assert.equal(response.status, direct.status, what)
          else assert.ok(response.status >= 400, what)
        }
      })
    }

    const identitySpellings: Header[] = [
      ['X_Auth_Tenant', 'tenant-b'],
      ['X_Auth_Permissions', 'projects:read,admin:all'],
      ['x_auth_subject', 'root'],
      ['X-Auth_Tenant', 'tenant-b'],
      ['x-auth-tenant', 'tenant-b'],
      ['X-AUTH-PERMISSIONS', 'admin:all'],
      ['X-Auth-Role', 'admin'],
      ['X-Auth-Request-Redirect', 'https://evil.example/'],
    ]
    for (const spoof of identitySpellings) {
      test(`${spoof[0]}: no spelling of an identity header reaches the upstream`, async () => {
        const lines: Header[] = [['Authorization', `Bearer ${stack.tokens.pat}`], spoof, spoof]
        const { response, upstream } = await through('GET', ALLOWED, lines)
        if (upstream === undefined) {
          assert.ok(response.status >= 400, `refused, or passed: ${response.status}`)
          return
        }
        assert.equal(response.status, 200)
        const names: string[] = []
        for (let i = 0; i < upstream.rawHeaders.length; i += 2) {
          const name = upstream.rawHeaders[i] as string
          if (!effective(name).startsWith('x-auth-')) continue
          assert.ok(IDENTITY.has(name.toLowerCase()), `${name} reached the upstream`)
          names.push(name.toLowerCase())
        }
        assert.equal(new Set(names).size, names.length, `a duplicate: ${names}`)
        assert.equal(upstream.headers['x-auth-tenant'], TEST_TENANT)
        assert.equal(upstream.headers['x-auth-subject'], 'ci-bot')
        assert.equal(upstream.headers['x-auth-permissions'], 'things:read')
      })
    }

    const steering: Header[] = [
      ['X-HTTP-Method-Override', 'DELETE'],
      ['X-HTTP-Method', 'DELETE'],
      ['X-Method-Override', 'DELETE'],
      ['X-Original-URL', '/api/v1/internal/secret'],
      ['X-Rewrite-URL', '/api/v1/internal/secret'],
      ['X_HTTP_Method_Override', 'DELETE'],
      ['x-http_method-override', 'DELETE'],
      ['X_Rewrite_URL', '/api/v1/internal/secret'],
    ]
    for (const spoof of steering) {
      test(`${spoof[0]}: method-override and URL-rewrite headers never reach the upstream`, async () => {
        const lines: Header[] = [['Authorization', `Bearer ${stack.tokens.pat}`], spoof]
        const { response, upstream } = await through('POST', ALLOWED, lines)
        if (upstream === undefined) {
          assert.ok(response.status >= 400, `refused, or passed: ${response.status}`)
          return
        }
        for (let i = 0; i < upstream.rawHeaders.length; i += 2) {
          const name = upstream.rawHeaders[i] as string
          assert.ok(!STEERING.has(effective(name)), `${name} reached the upstream`)
        }
      })
    }

    for (const cookie of [
      `theme=dark; ${SESSION_COOKIE}=s3cr3t-session; lang=en`,
      `${SESSION_COOKIE}=one; theme=dark; ${SESSION_COOKIE}=two`,
      `theme=dark; ${SIGN_IN_COOKIE}=state.nonce.verifier; lang=en`,
      `${SIGN_IN_COOKIE}=pending; theme=dark; ${SESSION_COOKIE}=s3cr3t-session`,
    ]) {
      test(`the console's cookies never reach the upstream (${cookie})`, async () => {
        const lines: Header[] = [
          ['Authorization', `Bearer ${stack.tokens.pat}`],
          ['Cookie', cookie],
        ]
        const { response, upstream } = await through('GET', ALLOWED, lines)
        if (upstream === undefined) {
          assert.ok(response.status >= 400, `refused, or passed: ${response.status}`)
          return
        }
        const seen = [upstream.headers.cookie].flat().join('; ')
        assert.ok(!seen.includes(SESSION_COOKIE), `the upstream got: ${seen}`)
        assert.ok(!seen.includes(SIGN_IN_COOKIE), `the upstream got: ${seen}`)
        assert.match(seen, /theme=dark/, 'the other cookies are kept')
      })
    }

    for (const origin of [APP_ORIGIN, 'https://evil.example']) {
      test(`a CORS preflight from ${origin} never reaches the upstream`, async () => {
        for (const path of ['/api/v1/internal/secret', '/api/v1/tenants/tenant-b/files']) {
          const { response, upstream } = await through('OPTIONS', path, [
            ['Origin', origin],
            ['Access-Control-Request-Method', 'DELETE'],
            ['Access-Control-Request-Headers', 'authorization,x-tenant-id'],
          ])
          assert.equal(upstream, undefined, `${path}: the preflight reached the upstream`)
          if (proxy === 'ingress-nginx') continue
          // tokengate answers it as its API port does: allowed origins only.
          assert.equal(response.status, 204, path)
          const allowOrigin = response.headers['access-control-allow-origin']
          assert.equal(allowOrigin, origin === APP_ORIGIN ? origin : undefined, path)
        }
      })
    }

    test('an OPTIONS request with a token is decided and passed like any other', async () => {
      const { response, upstream } = await through('OPTIONS', ALLOWED, [
        ['Authorization', `Bearer ${stack.tokens.pat}`],
      ])
      assert.equal(response.status, 200)
      assert.equal(upstream?.method, 'OPTIONS')
      assert.equal(upstream?.headers['x-auth-tenant'], TEST_TENANT)
    })

    test("each request's identity token has its own jti and the upstream's audience", async () => {
      const lines: Header[] = [['Authorization', `Bearer ${stack.tokens.pat}`]]
      const first = await through('GET', ALLOWED, lines)
      const second = await through('GET', ALLOWED, lines)
      const claims = [first, second].map(({ upstream }) => {
        const token = upstream?.headers['x-auth-token']
        assert.equal(typeof token, 'string', 'the upstream gets X-Auth-Token')
        return decodeJwt(token as string)
      })
      for (const payload of claims) {
        assert.equal(payload.aud, front.url, 'aud: the origin the client addressed')
        assert.equal(payload.iss, 'tokengate')
        assert.equal(payload.tenant_id, TEST_TENANT)
      }
      assert.notEqual(claims[0]?.jti, claims[1]?.jti, 'a fresh jti per token')
    })
  })
}

describe("red team through tokengate's gateway", () => {
  let stack: Stack
  before(async () => {
    stack = await startStack()
  })
  after(() => stack?.close())

  test('the admin session cookie never reaches the upstream, other cookies do', async () => {
    const seenBefore = stack.upstream.seen.length
    const response = await rawRequest(stack.gatewayUrl, ALLOWED, [
      ['Authorization', `Bearer ${stack.tokens.pat}`],
      ['Cookie', `theme=dark; ${SESSION_COOKIE}=s3cr3t-session; lang=en`],
      ['Cookie', `${SESSION_COOKIE}=again; ${SIGN_IN_COOKIE}=state.nonce.verifier`],
    ])
    assert.equal(response.status, 200, response.text)
    const upstream = stack.upstream.seen[seenBefore]
    const seen = [upstream?.headers.cookie].flat().join('; ')
    assert.ok(!seen.includes(SESSION_COOKIE), `the upstream got: ${seen}`)
    assert.ok(!seen.includes(SIGN_IN_COOKIE), `the upstream got: ${seen}`)
    assert.equal(seen, 'theme=dark; lang=en')
  })

  test("the identity token's audience is the upstream's origin, its jti fresh per request", async () => {
    const withToken = await startStack({ identityToken: true })
    try {
      const tokens: string[] = []
      for (let i = 0; i < 2; i++) {
        const seenBefore = withToken.upstream.seen.length
        const response = await rawRequest(withToken.gatewayUrl, ALLOWED, [
          ['Authorization', `Bearer ${withToken.tokens.pat}`],
        ])
        assert.equal(response.status, 200)
        tokens.push(String(withToken.upstream.seen[seenBefore]?.headers['x-auth-token']))
      }
      const [a, b] = tokens.map((token) => decodeJwt(token))
      assert.equal(a?.aud, withToken.upstream.url)
      assert.notEqual(a?.jti, b?.jti)
    } finally {
      await withToken.close()
    }
  })
})
