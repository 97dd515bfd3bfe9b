/**
 * A credential kind added by registration alone (no src/ edit): an `X-Api-Key` header kind,
 * defined here, works through the gate on the running server and on every library binding
 * (Express, Hono, node:http, Fastify) — allowed, refused with its own challenge scheme, its
 * fingerprint in the audit row, its limiter key, its label — while PAT and JWT still answer.
 */
import assert from 'node:assert/strict'
import { hash } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { serve } from '@hono/node-server'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { tokengate as expressGate, requirePermission } from '../../src/adapters/express.ts'
import { tokengate as fastifyGate } from '../../src/adapters/fastify.ts'
import {
  tokengate as honoGate,
  requirePermission as honoPermission,
  type TokengateEnv,
} from '../../src/adapters/hono.ts'
import { checkRequest, requestIdOf, sendRefused } from '../../src/adapters/node-http.ts'
import {
  type Authenticate,
  type CredentialKind,
  registerCredentialKind,
  unregisterCredentialKind,
} from '../../src/core/authenticate.ts'
import type { AuthResult, Principal } from '../../src/core/principal.ts'
import { headerValues } from '../../src/core/raw-headers.ts'
import {
  createSpecFixture,
  PROTECTED_PATH,
  REQUIRED_PERMISSION,
  send,
} from './../adapters/spec-table.ts'
import { checkRequest as envoyCheckRequest } from '../decision/envoy-check-requests.ts'
import { connectEnvoyAuthorization, type EnvoyAuthorization } from '../decision/envoy-client.ts'
import { type Stack, startStack } from '../decision/harness.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { listenLocal } from '../helpers/listen.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'

const GOOD_KEY = 'k-0123456789abcdef'
const READER_KEY = 'k-reader-0123456789'
const keys = new Map<string, { id: string; permissions: readonly string[] }>([
  [GOOD_KEY, { id: 'ak1', permissions: [] }],
  [READER_KEY, { id: 'ak2', permissions: [REQUIRED_PERMISSION, 'tokens:read'] }],
])

const apiKeyFingerprint = (key: string) => `apikey:${hash('sha256', key, 'hex').slice(0, 8)}`

/** The whole kind: claims `X-Api-Key`, looks the key up, describes itself. */
const apiKeyKind: CredentialKind = {
  name: 'apikey',
  challengeScheme: 'ApiKey',
  create: () => ({
    kind: 'apikey',
    claim(request) {
      const values = headerValues(request.headers, 'x-api-key')
      return values.length === 1 ? values[0] : undefined
    },
    authenticate(credential, context): AuthResult {
      const key = keys.get(credential)
      if (key === undefined) {
        return {
          ok: false,
          failure: {
            code: 'invalid_token',
            reason: 'unknown_token',
            detail: 'The access token is not valid.',
          },
        }
      }
      assert.ok(context.request.target?.startsWith('/'), 'the kind sees the target')
      const principal: Principal = {
        tokenType: 'apikey',
        tenantId: TEST_TENANT,
        subject: `key:${key.id}`,
        permissions: key.permissions,
        tokenId: key.id,
        expiresAt: null,
        fingerprint: apiKeyFingerprint(credential),
      }
      return { ok: true, principal }
    },
  }),
  fingerprint: (credential) => apiKeyFingerprint(credential),
  limiterKey: (principal) => `apikey:${principal.tokenId}`,
  storedKeyId: () => undefined,
}

registerCredentialKind(apiKeyKind)
after(() => unregisterCredentialKind('apikey'))

/** The checks every front end passes, on a route needing `REQUIRED_PERMISSION`. */
async function expectKindWorks(base: string, path: string): Promise<void> {
  const ok = await send(base, path, [['X-Api-Key', READER_KEY]])
  assert.equal(ok.status, 200, ok.body)

  const unknown = await send(base, path, [['X-Api-Key', 'k-not-a-key']])
  assert.equal(unknown.status, 401, unknown.body)
  assert.match(
    String(unknown.headers['www-authenticate']),
    /^ApiKey realm="tokengate", error="invalid_token"/,
  )
  assert.equal(JSON.parse(unknown.body).code, 'invalid_token')

  const weak = await send(base, path, [['X-Api-Key', GOOD_KEY]])
  assert.equal(weak.status, 403, weak.body)
  assert.match(
    String(weak.headers['www-authenticate']),
    /^ApiKey realm="tokengate", error="insufficient_scope"/,
  )

  // Nothing sent: the SPEC's Bearer challenge, unchanged.
  const none = await send(base, path, [])
  assert.equal(none.status, 401)
  assert.equal(none.headers['www-authenticate'], 'Bearer realm="tokengate"')
}

describe('a registered X-Api-Key kind on the library bindings', () => {
  let authenticate: Authenticate
  let pat: string
  before(async () => {
    // Built after the registration: the fixture's authenticator asks the new kind too.
    const fixture = await createSpecFixture()
    authenticate = fixture.authenticate
    pat = fixture.tokens.pat
  })

  test('express', async () => {
    const app = express()
    app.use(expressGate({ authenticate, prefix: '/api/v1/' }))
    app.get(PROTECTED_PATH, requirePermission(REQUIRED_PERMISSION), (_req, res) => {
      res.json({ ok: true })
    })
    const running = await listenLocal(createServer(app))
    try {
      await expectKindWorks(running.url, PROTECTED_PATH)
      const bearer = await send(running.url, PROTECTED_PATH, [['Authorization', `Bearer ${pat}`]])
      assert.equal(bearer.status, 200, 'a PAT still works beside it')
    } finally {
      await running.close()
    }
  })

  test('hono', async () => {
    const app = new Hono<TokengateEnv>()
    app.use('/api/v1/*', honoGate({ authenticate }))
    app.get(PROTECTED_PATH, honoPermission(REQUIRED_PERMISSION), (c) => c.json({ ok: true }))
    const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
      const s = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, () => resolve(s))
    })
    const { port } = server.address() as AddressInfo
    try {
      await expectKindWorks(`http://127.0.0.1:${port}`, PROTECTED_PATH)
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })

  test('node:http', async () => {
    const running = await listenLocal(
      createServer(async (req, res) => {
        const requestId = requestIdOf(req)
        const outcome = await checkRequest(
          req,
          { authenticate },
          { requestId, permissions: [REQUIRED_PERMISSION] },
        )
        if (!outcome.allowed) return sendRefused(res, outcome)
        res.writeHead(200).end('{}')
      }),
    )
    try {
      await expectKindWorks(running.url, PROTECTED_PATH)
    } finally {
      await running.close()
    }
  })

  test('fastify plugin', async () => {
    const app = Fastify()
    await app.register(fastifyGate, { authenticate })
    app.get(PROTECTED_PATH, { config: { permissions: [REQUIRED_PERMISSION] } }, async () => ({
      ok: true,
    }))
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    try {
      await expectKindWorks(url, PROTECTED_PATH)
    } finally {
      await app.close()
    }
  })
})

describe('a registered X-Api-Key kind on the running server', () => {
  let server: TestServer
  before(async () => {
    server = await startTestServer()
    assert.equal((await server.cli('tenant', 'create', TEST_TENANT)).code, 0)
  })
  after(() => server?.close())

  test('allowed with its label and limiter key; refused with its challenge and audited with its fingerprint', async () => {
    const me = await server.request('/api/v1/me', ['X-Api-Key', READER_KEY])
    assert.equal(me.status, 200, me.text)
    assert.equal(me.json.tokenType, 'apikey')
    assert.equal(me.json.subject, 'key:ak2')
    assert.ok(me.headers.ratelimit, 'the per-token limit counted the key (its limiter key)')

    const tokens = await server.request('/api/v1/tokens', ['X-Api-Key', GOOD_KEY])
    assert.equal(tokens.status, 403)
    assert.match(String(tokens.headers['www-authenticate']), /^ApiKey realm="tokengate"/)

    const refused = await server.request('/api/v1/me', [
      'X-Api-Key',
      'k-wrong',
      'X-Request-Id',
      'kind-test-1',
    ])
    assert.equal(refused.status, 401)
    assert.match(
      String(refused.headers['www-authenticate']),
      /^ApiKey realm="tokengate", error="invalid_token"/,
    )
    assert.equal(refused.headers['x-request-id'], 'kind-test-1')

    let rows: Array<{ actor: string | null; request_id: string }> = []
    for (let i = 0; i < 60 && rows.length === 0; i++) {
      const db = new DatabaseSync(join(server.dataDir, 'tokengate.db'), { readOnly: true })
      rows = db
        .prepare(
          "SELECT actor, request_id FROM audit_events WHERE type = 'auth.failed' AND request_id = 'kind-test-1'",
        )
        .all() as typeof rows
      db.close()
      if (rows.length === 0) await sleep(50)
    }
    assert.deepEqual(
      rows.map((row) => ({ ...row })),
      [{ actor: apiKeyFingerprint('k-wrong'), request_id: 'kind-test-1' }],
    )
    assert.ok(!JSON.stringify(server.logs).includes('k-wrong'), 'the key is never logged')
  })
})

describe('a registered X-Api-Key kind through the gateway and the decision API', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack()
  })
  after(() => stack?.close())

  test('gateway and forward-auth decision: allowed, refused with its challenge', async () => {
    for (const url of [stack.gatewayUrl, stack.decisionUrl]) {
      const ok = await send(url, PROTECTED_PATH, [['X-Api-Key', READER_KEY]])
      assert.equal(ok.status, 200, `${url}: ${ok.body}`)
      const refused = await send(url, PROTECTED_PATH, [['X-Api-Key', 'k-wrong']])
      assert.equal(refused.status, 401, url)
      assert.match(String(refused.headers['www-authenticate']), /^ApiKey realm="tokengate"/)
    }
  })
})

describe('a registered X-Api-Key kind through Envoy gRPC ext_authz', () => {
  let stack: Stack
  let client: EnvoyAuthorization<GrpcCheck>
  before(async () => {
    stack = await startStack({ proxy: 'envoy', grpc: true })
    client = connectEnvoyAuthorization(stack.grpcUrl as string)
  })
  after(async () => {
    client?.close()
    await stack?.close()
  })

  const check = (lines: [string, string][]) =>
    client.check(envoyCheckRequest('GET', PROTECTED_PATH, lines, { raw: true }))

  test('allowed with its principal; refused with its challenge', async () => {
    const ok = await check([['X-Api-Key', READER_KEY]])
    assert.equal(ok.http_response, 'ok_response')
    const refused = await check([['X-Api-Key', 'k-wrong']])
    assert.equal(refused.http_response, 'denied_response')
    const challenge = refused.denied_response?.headers?.find(
      (h) => h.header.key.toLowerCase() === 'www-authenticate',
    )
    assert.match(String(challenge?.header.value), /^ApiKey realm="tokengate"/)
  })
})

interface GrpcCheck {
  http_response: 'ok_response' | 'denied_response'
  denied_response?: { headers?: { header: { key: string; value: string } }[] }
}
