import assert from 'node:assert/strict'
import { request as httpRequest } from 'node:http'
import { describe, test } from 'node:test'
import { TEST_TENANT } from '../helpers/jwt.ts'
import {
  OTHER_TENANT,
  patternBytes,
  sha256,
  startGateway,
  startUpstream,
  useProxiedGateway,
} from './harness.ts'

const POLICY = `
default: authenticated
rules:
  - methods: [GET]
    path: /api/v1/projects/*
    permissions: [projects:read]
  - methods: [POST, PUT, DELETE]
    path: /api/v1/projects/*
    permissions: [projects:write]
  - methods: '*'
    path: /api/v1/tenants/:tenant/*
    tenantParam: tenant
  - methods: '*'
    path: /api/v1/internal/*
    deny: true
`

const auth = (token: string, extra: Record<string, string> = {}) => ({
  authorization: `Bearer ${token}`,
  ...extra,
})

describe('gateway: proxied requests', () => {
  const proxied = useProxiedGateway({ policy: POLICY, timeoutMs: 10_000 })

  test('a proxied request arrives with the identity headers and without Authorization', async () => {
    const token = await proxied.gateway.pat(['things:read', 'things:write'])
    const response = await fetch(`${proxied.gateway.url}/api/v1/things/1?x=1`, {
      headers: auth(token, { 'x-request-id': 'req-abc' }),
    })
    assert.equal(response.status, 200)
    const seen = proxied.upstream.seen.at(-1)
    assert.ok(seen)
    assert.equal(seen.url, '/api/v1/things/1?x=1')
    assert.equal(seen.headers.authorization, undefined)
    assert.equal(seen.headers['x-auth-tenant'], TEST_TENANT)
    assert.equal(seen.headers['x-auth-subject'], 'ci-bot')
    assert.equal(seen.headers['x-auth-token-type'], 'pat')
    assert.match(String(seen.headers['x-auth-token-id']), /^tok_/)
    assert.equal(seen.headers['x-auth-permissions'], 'things:read,things:write')
    assert.equal(seen.headers['x-request-id'], 'req-abc')
    assert.equal(seen.headers['x-forwarded-for'], '127.0.0.1')
    assert.equal(seen.headers['x-forwarded-proto'], 'http')
    // Not sent unless proxied.gateway.forwardedHost: the caller's Host is the caller's claim.
    assert.equal(seen.headers['x-forwarded-host'], undefined)
    // The caller sees the gateway's request id, not the upstream's.
    assert.equal(response.headers.get('x-request-id'), 'req-abc')
  })

  test('a JWT caller is identified the same way', async () => {
    const token = await proxied.gateway.jwt(['a:b'], { sub: 'alice', jti: 'jti-42' })
    const response = await fetch(`${proxied.gateway.url}/api/v1/things`, {
      headers: auth(token, { 'x-tenant-id': TEST_TENANT }),
    })
    assert.equal(response.status, 200)
    const seen = proxied.upstream.seen.at(-1)
    assert.equal(seen?.headers['x-auth-token-type'], 'jwt')
    assert.equal(seen?.headers['x-auth-subject'], 'alice')
    assert.equal(seen?.headers['x-auth-token-id'], 'jti-42')
    assert.equal(seen?.headers['x-auth-permissions'], 'a:b')
  })

  test('spoofed X-Auth-* and forwarding headers from the caller are gone', async () => {
    const token = await proxied.gateway.pat([])
    const status = await rawRequest(proxied.gateway.url, '/api/v1/things', [
      ['Authorization', `Bearer ${token}`],
      ['X-Auth-Tenant', OTHER_TENANT],
      ['x-auth-tenant', 'second'],
      ['X-AUTH-PERMISSIONS', 'admin'],
      ['X-Auth-Token', 'forged'],
      ['X-Auth-Anything', 'x'],
      ['X-Forwarded-For', '6.6.6.6'],
      ['Forwarded', 'for=6.6.6.6'],
    ])
    assert.equal(status, 200)
    const seen = proxied.upstream.seen.at(-1)
    assert.ok(seen)
    assert.equal(seen.headers['x-auth-tenant'], TEST_TENANT)
    assert.equal(seen.headers['x-auth-permissions'], '')
    assert.equal(seen.headers['x-auth-token'], undefined)
    assert.equal(seen.headers['x-auth-anything'], undefined)
    assert.equal(seen.headers['x-forwarded-for'], '127.0.0.1')
    assert.equal(seen.headers.forwarded, undefined)
    const tenantLines = seen.rawHeaders.filter((_, i) => i % 2 === 0 && /^x-auth-tenant$/i.test(_))
    assert.equal(tenantLines.length, 1)
  })

  test('hop-by-hop headers are removed in both directions', async () => {
    const token = await proxied.gateway.pat([])
    const status = await rawRequest(proxied.gateway.url, '/api/v1/hop', [
      ['Authorization', `Bearer ${token}`],
      ['Connection', 'keep-alive, X-Drop-Me'],
      ['X-Drop-Me', 'secret'],
      ['Keep-Alive', 'timeout=5'],
      ['TE', 'trailers'],
      ['Proxy-Authorization', 'Basic Zm9vOmJhcg=='],
      ['Upgrade', 'websocket'],
    ])
    assert.equal(status, 200)
    const seen = proxied.upstream.seen.at(-1)
    assert.ok(seen)
    for (const name of ['x-drop-me', 'te', 'proxy-authorization', 'upgrade']) {
      assert.equal(seen.headers[name], undefined, name)
    }
    const response = await fetch(`${proxied.gateway.url}/api/v1/hop`, { headers: auth(token) })
    assert.equal(response.status, 200)
    assert.equal(response.headers.get('x-secret-hop'), null)
    assert.equal(response.headers.get('proxy-authenticate'), null)
  })

  test('a multi-megabyte upload streams through intact', async () => {
    const token = await proxied.gateway.pat(['projects:write'])
    const body = patternBytes(8 * 1024 * 1024 + 123)
    const response = await fetch(`${proxied.gateway.url}/api/v1/projects/7/files`, {
      method: 'PUT',
      headers: auth(token, { 'content-type': 'application/octet-stream' }),
      body: new Uint8Array(body),
    })
    assert.equal(response.status, 200)
    const echoed = (await response.json()) as { bodyBytes: number; bodySha256: string }
    assert.equal(echoed.bodyBytes, body.length)
    assert.equal(echoed.bodySha256, sha256(body))
  })

  test('a JSON body larger than the built-in body limit is streamed, not parsed', async () => {
    const token = await proxied.gateway.pat([])
    const body = `{"data":"${'x'.repeat(2 * 1024 * 1024)}"}`
    const response = await fetch(`${proxied.gateway.url}/api/v1/things`, {
      method: 'POST',
      headers: auth(token, { 'content-type': 'application/json' }),
      body,
    })
    assert.equal(response.status, 200)
    const echoed = (await response.json()) as { bodyBytes: number; bodySha256: string }
    assert.equal(echoed.bodyBytes, Buffer.byteLength(body))
    assert.equal(echoed.bodySha256, sha256(Buffer.from(body)))
  })

  test('a chunked upload without Content-Type streams through', async () => {
    const token = await proxied.gateway.pat([])
    const body = patternBytes(3 * 1024 * 1024)
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < body.length; i += 100_000)
          controller.enqueue(body.subarray(i, i + 100_000))
        controller.close()
      },
    })
    const response = await fetch(`${proxied.gateway.url}/api/v1/things`, {
      method: 'POST',
      headers: auth(token),
      body: stream,
      duplex: 'half',
    } as RequestInit)
    assert.equal(response.status, 200)
    const echoed = (await response.json()) as { bodyBytes: number; bodySha256: string }
    assert.equal(echoed.bodySha256, sha256(body))
  })

  test('a multi-megabyte download streams through intact', async () => {
    const token = await proxied.gateway.pat([])
    const size = 16 * 1024 * 1024 + 7
    const response = await fetch(`${proxied.gateway.url}/api/v1/download?bytes=${size}`, {
      headers: auth(token),
    })
    assert.equal(response.status, 200)
    const data = Buffer.from(await response.arrayBuffer())
    assert.equal(data.length, size)
    assert.equal(sha256(data), sha256(patternBytes(size)))
  })

  test('built-in routes are still answered by tokengate', async () => {
    const token = await proxied.gateway.pat(['tokens:read'])
    const before = proxied.upstream.seen.length
    const me = await fetch(`${proxied.gateway.url}/api/v1/me`, { headers: auth(token) })
    assert.equal(me.status, 200)
    assert.equal(((await me.json()) as { tenantId: string }).tenantId, TEST_TENANT)
    const list = await fetch(`${proxied.gateway.url}/api/v1/tokens`, { headers: auth(token) })
    assert.equal(list.status, 200)
    // Another method on a built-in path stays with tokengate too.
    const post = await fetch(`${proxied.gateway.url}/api/v1/me`, {
      method: 'POST',
      headers: auth(token),
    })
    assert.equal(post.status, 404)
    const nested = await fetch(`${proxied.gateway.url}/api/v1/tokens/x/y`, { headers: auth(token) })
    assert.equal(nested.status, 404)
    assert.equal(proxied.upstream.seen.length, before)
  })

  test('unauthenticated proxied path → 401 and the upstream never sees the request', async () => {
    const before = proxied.upstream.seen.length
    const missing = await fetch(`${proxied.gateway.url}/api/v1/things`)
    assert.equal(missing.status, 401)
    assert.equal(((await missing.json()) as { code: string }).code, 'missing_authorization')
    const invalid = await fetch(`${proxied.gateway.url}/api/v1/things`, {
      method: 'POST',
      headers: auth('pat_invalid', { 'content-type': 'application/octet-stream' }),
      body: new Uint8Array(patternBytes(1024)),
    })
    assert.equal(invalid.status, 401)
    assert.equal(invalid.headers.get('www-authenticate')?.startsWith('Bearer realm='), true)
    assert.equal(proxied.upstream.seen.length, before)
  })
})

describe('gateway: policy', () => {
  const proxied = useProxiedGateway({ policy: POLICY })

  test('a rule whose permission is not held → 403 insufficient_permission', async () => {
    const token = await proxied.gateway.pat(['projects:read'])
    const before = proxied.upstream.seen.length
    const response = await fetch(`${proxied.gateway.url}/api/v1/projects/7`, {
      method: 'DELETE',
      headers: auth(token),
    })
    assert.equal(response.status, 403)
    assert.match(response.headers.get('content-type') ?? '', /^application\/problem\+json/)
    assert.equal(
      response.headers.get('www-authenticate'),
      'Bearer realm="tokengate", error="insufficient_scope", scope="projects:write"',
    )
    const body = (await response.json()) as { code: string; required: string[] }
    assert.equal(body.code, 'insufficient_permission')
    assert.deepEqual(body.required, ['projects:write'])
    assert.equal(proxied.upstream.seen.length, before)
  })

  test('the permission held → proxied; a GET rule also covers HEAD', async () => {
    const token = await proxied.gateway.pat(['projects:read'])
    const get = await fetch(`${proxied.gateway.url}/api/v1/projects/7`, { headers: auth(token) })
    assert.equal(get.status, 200)
    const writer = await proxied.gateway.pat(['projects:write'])
    const head = await fetch(`${proxied.gateway.url}/api/v1/projects/7`, {
      method: 'HEAD',
      headers: auth(writer),
    })
    assert.equal(head.status, 403)
  })

  test('paths are matched case-insensitively, so /PROJECTS is not a way around the rule', async () => {
    const token = await proxied.gateway.pat([])
    const response = await fetch(`${proxied.gateway.url}/api/v1/PROJECTS/7`, {
      headers: auth(token),
    })
    assert.equal(response.status, 403)
  })

  test('ambiguous paths (encoded slash, dot segments, //) → 400 and never proxied', async () => {
    const token = await proxied.gateway.pat([])
    const before = proxied.upstream.seen.length
    for (const path of [
      '/api/v1/public%2F..%2Fprojects/1',
      '/api/v1/x/%2e%2e/projects/1',
      '/api/v1//projects/1',
    ]) {
      const status = await rawRequest(proxied.gateway.url, path, [
        ['Authorization', `Bearer ${token}`],
      ])
      assert.equal(status, 400, path)
    }
    assert.equal(proxied.upstream.seen.length, before)
  })

  test('tenantParam: the caller’s own tenant is proxied, another tenant → 403', async () => {
    const token = await proxied.gateway.pat([])
    const own = await fetch(`${proxied.gateway.url}/api/v1/tenants/${TEST_TENANT}/files`, {
      headers: auth(token),
    })
    assert.equal(own.status, 200)
    const before = proxied.upstream.seen.length
    for (const tenant of [OTHER_TENANT, TEST_TENANT.toUpperCase(), `${TEST_TENANT}x`]) {
      const other = await fetch(`${proxied.gateway.url}/api/v1/tenants/${tenant}/files`, {
        headers: auth(token),
      })
      assert.equal(other.status, 403, tenant)
      const body = (await other.json()) as { code: string; detail: string }
      assert.equal(body.code, 'insufficient_permission')
      assert.match(body.detail, /tenant/)
    }
    assert.equal(proxied.upstream.seen.length, before)
  })

  test('a deny rule answers like an unknown path (404) and never proxies', async () => {
    const token = await proxied.gateway.pat(['projects:read', 'projects:write'])
    const before = proxied.upstream.seen.length
    const response = await fetch(`${proxied.gateway.url}/api/v1/internal/metrics`, {
      headers: auth(token),
    })
    assert.equal(response.status, 404)
    assert.equal(((await response.json()) as { code: string }).code, 'not_found')
    assert.equal(proxied.upstream.seen.length, before)
  })

  test('a refused path is audited capped at 512 characters and with tokens redacted', async () => {
    const caller = await proxied.gateway.pat(['projects:read'])
    const reader = await proxied.gateway.pat(['audit:read'])
    const leaked = await proxied.gateway.pat([])
    const path = `/api/v1/internal/${leaked}/${'a'.repeat(6000)}`
    const refused = await fetch(`${proxied.gateway.url}${path}`, { headers: auth(caller) })
    assert.equal(refused.status, 404)
    const requestId = refused.headers.get('x-request-id')
    let event: { details: { path: string } } | undefined
    for (let i = 0; i < 50 && !event; i++) {
      const listed = await fetch(`${proxied.gateway.url}/api/v1/audit-events?limit=200`, {
        headers: auth(reader),
      })
      const { items } = (await listed.json()) as {
        items: Array<{ requestId: string; details: { path: string } }>
      }
      event = items.find((e) => e.requestId === requestId)
      if (!event) await new Promise((resolve) => setTimeout(resolve, 100))
    }
    assert.ok(event, 'the refusal is audited')
    assert.ok(!event.details.path.includes(leaked), 'no token in the audited path')
    assert.ok(event.details.path.startsWith('/api/v1/internal/'), event.details.path)
    assert.ok(event.details.path.length <= 512 + 20, `audited path of ${event.details.path.length}`)
  })

  test('unmatched route with default authenticated → proxied for any valid token', async () => {
    const token = await proxied.gateway.pat([])
    const response = await fetch(`${proxied.gateway.url}/api/v1/elsewhere`, {
      headers: auth(token),
    })
    assert.equal(response.status, 200)
  })
})

describe('gateway: default deny', () => {
  const proxied = useProxiedGateway({
    policy: 'default: deny\nrules:\n - { methods: [GET], path: /api/v1/open/* }\n',
  })

  test('unmatched route with default deny → 404; a matching rule is proxied', async () => {
    const token = await proxied.gateway.pat(['everything'])
    const denied = await fetch(`${proxied.gateway.url}/api/v1/elsewhere`, { headers: auth(token) })
    assert.equal(denied.status, 404)
    assert.equal(proxied.upstream.seen.length, 0)
    const open = await fetch(`${proxied.gateway.url}/api/v1/open/x`, { headers: auth(token) })
    assert.equal(open.status, 200)
    assert.equal(proxied.upstream.seen.length, 1)
  })
})

describe('gateway: behind trusted proxies', () => {
  const proxied = useProxiedGateway({ policy: POLICY, server: { trustProxy: true } })

  test('X-Forwarded-For is the whole chain, furthest first, ending with the peer', async () => {
    const token = await proxied.gateway.pat(['projects:read'])
    const response = await fetch(`${proxied.gateway.url}/api/v1/projects/1`, {
      headers: auth(token, { 'x-forwarded-for': '198.51.100.7, 203.0.113.5' }),
    })
    assert.equal(response.status, 200)
    const seen = proxied.upstream.seen.at(-1)
    assert.equal(seen?.headers['x-forwarded-for'], '198.51.100.7, 203.0.113.5, 127.0.0.1')
    assert.equal(
      seen?.rawHeaders.filter((name) => name.toLowerCase() === 'x-forwarded-for').length,
      1,
    )
  })
})

describe('gateway: upstream failures', () => {
  test('upstream down → 502 problem+json without internals', async () => {
    const upstream = await startUpstream()
    const url = upstream.url
    await upstream.close()
    const gateway = await startGateway({ upstream: url, timeoutMs: 2000 })
    try {
      const token = await gateway.pat([])
      const started = Date.now()
      const response = await fetch(`${gateway.url}/api/v1/things`, { headers: auth(token) })
      assert.equal(response.status, 502)
      assert.ok(Date.now() - started < 2000)
      assert.match(response.headers.get('content-type') ?? '', /^application\/problem\+json/)
      const text = await response.text()
      const body = JSON.parse(text) as { code: string; status: number }
      assert.equal(body.code, 'bad_gateway')
      assert.equal(body.status, 502)
      assert.doesNotMatch(text, /ECONNREFUSED|127\.0\.0\.1|at |stack/i)
    } finally {
      await gateway.close()
    }
  })

  test('slow upstream → 504 problem+json within the timeout', async () => {
    const upstream = await startUpstream()
    const gateway = await startGateway({ upstream: upstream.url, timeoutMs: 1500 })
    try {
      const token = await gateway.pat([])
      const started = Date.now()
      const response = await fetch(`${gateway.url}/api/v1/slow`, { headers: auth(token) })
      const elapsed = Date.now() - started
      assert.equal(response.status, 504)
      assert.ok(elapsed >= 1400 && elapsed < 4000, `answered after ${elapsed} ms`)
      const body = (await response.json()) as { code: string }
      assert.equal(body.code, 'gateway_timeout')
      // The gateway is still healthy afterwards.
      const next = await fetch(`${gateway.url}/api/v1/things`, { headers: auth(token) })
      assert.equal(next.status, 200)
    } finally {
      await gateway.close()
      await upstream.close()
    }
  })

  test('an https upstream with an untrusted certificate → 502 (certificates are verified)', async () => {
    const { createServer } = await import('node:https')
    const { ensureDevCertificate } = await import('../../src/server/tls.ts')
    const { mkdtempSync, rmSync } = await import('node:fs')
    const { tmpdir } = await import('node:os')
    const { join } = await import('node:path')
    const dir = mkdtempSync(join(tmpdir(), 'tokengate-cert-'))
    const tls = await ensureDevCertificate(dir)
    let reached = 0
    const server = createServer({ cert: tls.cert, key: tls.key }, (_req, res) => {
      reached++
      res.end('secret')
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const port = (server.address() as { port: number }).port
    const gateway = await startGateway({ upstream: `https://127.0.0.1:${port}` })
    try {
      const token = await gateway.pat([])
      const response = await fetch(`${gateway.url}/api/v1/things`, { headers: auth(token) })
      assert.equal(response.status, 502)
      assert.equal(reached, 0)
    } finally {
      await gateway.close()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

/** Sends a request with exactly these header lines (fetch would merge or refuse some). */
function rawRequest(base: string, path: string, headers: [string, string][]): Promise<number> {
  const url = new URL(base)
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path,
        method: 'GET',
        headers: [['Host', url.host], ...headers].flat(),
      },
      (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode ?? 0))
      },
    )
    req.on('error', reject)
    req.end()
  })
}

describe('gateway: upstream URL with a path', () => {
  test('the path prefixes every proxied path; the query string is kept', async () => {
    const upstream = await startUpstream()
    const gateway = await startGateway({ upstream: `${upstream.url}/internal/` })
    try {
      const token = await gateway.pat([])
      const response = await fetch(`${gateway.url}/api/v1/things/1?a=b&c=d`, {
        headers: auth(token),
      })
      assert.equal(response.status, 200)
      assert.equal(upstream.seen.at(-1)?.url, '/internal/api/v1/things/1?a=b&c=d')
    } finally {
      await gateway.close()
      await upstream.close()
    }
  })

  test('an invalid policy file stops the start with the line of each problem', async () => {
    await assert.rejects(
      startGateway({
        upstream: 'http://127.0.0.1:9',
        policy: 'rules:\n  - methods: [GET]\n    path: /not-api\n',
      }),
      /policy\.yaml:3:11: rules\[0\]\.path: must start with \/api\/v1\//,
    )
  })
})
