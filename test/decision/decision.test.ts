/**
 * The decision listener spoken to directly, as each proxy speaks to it: who may state the
 * original request, the Envoy path-prefix shape, refusals of ambiguous statements, and the
 * signed identity token with its JWKS.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { createLocalJWKSet, jwtVerify } from 'jose'
import { createProxyMatcher, readForwardedRequest } from '../../src/decision/forwarded-request.ts'
import { openStore } from '../../src/stores/open-store.ts'
import type { StoredAuditEvent } from '../../src/stores/store.ts'
import { PROTECTED_PATH, send } from '../adapters/spec-table.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { SPEC_POLICY, type Stack, startStack } from './harness.ts'

const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`]

describe('decision API: the original request is believed only from trusted proxies', () => {
  let trusting: Stack
  let distrusting: Stack
  before(async () => {
    trusting = await startStack()
    distrusting = await startStack({ trustedProxies: '10.9.9.9, 192.168.0.0/16' })
  })
  after(async () => {
    await trusting?.close()
    await distrusting?.close()
  })

  for (const [family, method, uri] of [
    ['nginx', 'X-Original-Method', 'X-Original-URI'],
    ['Caddy/Traefik', 'X-Forwarded-Method', 'X-Forwarded-Uri'],
  ] as const) {
    test(`${family}: a direct caller's ${uri} does not change what is decided`, async () => {
      // The token may not read /api/v1/things; the forged header claims another path.
      const lines: [string, string][] = [
        bearer(trusting.tokens.patWithoutPermission),
        [method, 'GET'],
        [uri, '/api/v1/elsewhere'],
      ]
      const fromProxy = await send(trusting.decisionUrl, PROTECTED_PATH, lines)
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
    const response = await send(trusting.decisionUrl, '/', [
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
    const caddy = await send(trusting.decisionUrl, '/', [
      ['X-Forwarded-Method', 'GET'],
      ['X-Forwarded-Uri', PROTECTED_PATH],
    ])
    assert.equal(caddy.status, 401)
    assert.equal(caddy.headers['x-tokengate-problem'], undefined)
  })
})

describe("decision API: the client address is the proxy's word too", () => {
  let trusting: Stack
  let distrusting: Stack
  before(async () => {
    trusting = await startStack({ failedAuthMax: 2 })
    distrusting = await startStack({ failedAuthMax: 2, trustedProxies: '10.9.9.9' })
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
    stack = await startStack({ pathPrefix: '/ext-authz' })
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

  test('a path without the prefix is refused', async () => {
    const response = await send(stack.decisionUrl, PROTECTED_PATH, [bearer(stack.tokens.pat)])
    assert.equal(response.status, 400)
  })
})

describe('decision API + gateway: signed identity token', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({ identityToken: true })
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
    for (const spelling of [
      [
        ['X-Original-Method', 'GET'],
        ['X-Original-URI', '/.well-known/jwks.json'],
      ],
      [
        ['X-Forwarded-Method', 'GET'],
        ['X-Forwarded-Uri', '/.well-known/jwks.json'],
      ],
      [],
    ] as [string, string][][]) {
      const asked = await send(stack.decisionUrl, '/.well-known/jwks.json', spelling)
      assert.equal(asked.status, 404, JSON.stringify(spelling))
    }
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
  test('addresses, CIDR blocks and IPv4-mapped peers', () => {
    const trusted = createProxyMatcher('127.0.0.1, 10.0.0.0/8, fd00::/8')
    assert.equal(trusted('127.0.0.1'), true)
    assert.equal(trusted('::ffff:127.0.0.1'), true)
    assert.equal(trusted('10.200.1.1'), true)
    assert.equal(trusted('fd12::1'), true)
    assert.equal(trusted('127.0.0.2'), false)
    assert.equal(trusted(undefined), false)
  })

  test('a bad entry stops the start', () => {
    for (const bad of ['localhost', '10.0.0.0/33', '10.0.0.1/x']) {
      assert.throws(() => createProxyMatcher(bad), /trustedProxies/)
    }
  })

  test('ingress-nginx: X-Original-URL stands for the URI, its spelling kept for the policy', () => {
    const read = readForwardedRequest(
      ['X-Original-Method', 'GET', 'X-Original-URL', 'https://api.example.com/api/v1/a/../b?x=1'],
      { method: 'GET', url: '/' },
      { trusted: true, pathPrefix: '' },
    )
    assert.deepEqual(read, { ok: true, kind: 'nginx', method: 'GET', url: '/api/v1/a/../b?x=1' })
  })

  test('an untrusted peer is decided on its request line', () => {
    const read = readForwardedRequest(
      ['X-Original-URI', '/api/v1/a', 'X-Original-Method', 'POST'],
      { method: 'GET', url: '/api/v1/b' },
      { trusted: false, pathPrefix: '' },
    )
    assert.deepEqual(read, { ok: true, kind: 'request-line', method: 'GET', url: '/api/v1/b' })
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
