/**
 * The SPEC table through real nginx (auth_request), Caddy (forward_auth) and nginx as
 * ingress-nginx generates it for `auth-url` (ingress-nginx-shape.ts), each configured
 * exactly as examples/forward-auth/ documents, in front of a real upstream. Every case must
 * get the same status as tokengate's own server (its gateway, same instance, same policy),
 * and through nginx and Caddy the same challenge and body too (ingress-nginx answers a
 * refusal with nginx's own body, and anything but 401/403 as 500: docs/forward-auth.md); a
 * refusal never reaches the upstream; an accepted request reaches it with tokengate's
 * identity headers and never the caller's spoofed ones.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { PROTECTED_PATH, SPEC_CASES, send } from '../adapters/spec-table.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { skipReason } from '../helpers/services.ts'
import {
  type ProxyProcess,
  SPOOFED_IDENTITY,
  type Stack,
  startCaddy,
  startIngressNginx,
  startNginx,
  startStack,
} from './harness.ts'

const PROXIES = {
  nginx: { binary: 'nginx', start: startNginx },
  caddy: { binary: 'caddy', start: startCaddy },
  'ingress-nginx': { binary: 'nginx', start: startIngressNginx },
} as const
type Proxy = keyof typeof PROXIES

/**
 * Cases a proxy refuses itself before asking tokengate, with the status it answers.
 * nginx: a second Authorization line is a 400 "client sent duplicate header line" of its own
 * (ngx_http_process_unique_header_line); the request is refused either way.
 */
const PROXY_OWN_ANSWERS: Record<Proxy, Record<string, number>> = {
  nginx: { 'two Authorization headers → 401 malformed_authorization': 400 },
  'ingress-nginx': { 'two Authorization headers → 401 malformed_authorization': 400 },
  caddy: {},
}

/** ingress-nginx passes 401 and 403 on; every other refusal becomes its own 500. */
const ingressStatus = (status: number) => (status === 401 || status === 403 ? status : 500)

const IDENTITY = [
  'x-auth-tenant',
  'x-auth-subject',
  'x-auth-token-type',
  'x-auth-token-id',
  'x-auth-permissions',
]

for (const [proxy, { binary, start }] of Object.entries(PROXIES) as [
  Proxy,
  (typeof PROXIES)[Proxy],
][]) {
  const exact = proxy !== 'ingress-nginx'
  describe(`${proxy} → tokengate decision API → upstream: SPEC table`, {
    skip: skipReason(binary),
  }, () => {
    let stack: Stack
    let front: ProxyProcess
    before(async () => {
      stack = await startStack({ proxy })
      front = await start({ decision: stack.decisionPort, upstream: stack.upstream.port })
    })
    after(async () => {
      await front?.stop()
      await stack?.close()
    })

    for (const specCase of SPEC_CASES) {
      test(specCase.name, async () => {
        const lines = specCase.headers(stack.tokens)
        const own = PROXY_OWN_ANSWERS[proxy][specCase.name]
        const seenBefore = stack.upstream.seen.length
        const proxied = await send(front.url, PROTECTED_PATH, [...lines, ...SPOOFED_IDENTITY])
        if (own !== undefined) {
          assert.equal(proxied.status, own, front.log())
          assert.equal(stack.upstream.seen.length, seenBefore, 'a refusal reached the upstream')
          return
        }
        if (specCase.status !== 200) {
          assert.equal(stack.upstream.seen.length, seenBefore, 'a refusal reached the upstream')
        }
        const direct = await send(stack.gatewayUrl, PROTECTED_PATH, [...lines, ...SPOOFED_IDENTITY])
        assert.equal(direct.status, specCase.status)
        assert.equal(proxied.status, direct.status, `${proxied.body}\n${front.log()}`)

        if (specCase.status === 200) {
          assert.equal(stack.upstream.seen.length, seenBefore + 2)
          const [viaProxy, viaGateway] = stack.upstream.seen.slice(-2).map((seen) => seen.headers)
          assert.equal(viaProxy?.['x-auth-tenant'], TEST_TENANT)
          for (const name of IDENTITY) assert.equal(viaProxy?.[name], viaGateway?.[name], name)
          assert.equal(viaProxy?.authorization, undefined)
          if (exact) assert.equal(proxied.headers['x-request-id'], viaProxy?.['x-request-id'])
          return
        }
        assert.equal(proxied.headers['x-tokengate-problem'], undefined)
        // ingress-nginx (auth_request alone) passes WWW-Authenticate on a 401 only.
        if (exact || proxied.status === 401) {
          assert.equal(proxied.headers['www-authenticate'], direct.headers['www-authenticate'])
        }
        if (!exact) return
        const { requestId, ...body } = JSON.parse(proxied.body) as Record<string, unknown>
        const { requestId: _, ...expected } = JSON.parse(direct.body) as Record<string, unknown>
        assert.deepEqual(body, expected)
        assert.equal(proxied.headers['x-request-id'], requestId)
        assert.equal(proxied.headers['content-type'], direct.headers['content-type'])
        assert.equal(proxied.headers['cache-control'], direct.headers['cache-control'])
        assert.equal(proxied.headers['ratelimit-policy'], direct.headers['ratelimit-policy'])
        assert.equal(typeof proxied.headers.ratelimit, typeof direct.headers.ratelimit)
      })
    }

    test('an unreachable JWKS answers 503 with Retry-After, as tokengate does', async () => {
      const seenBefore = stack.upstream.seen.length
      const lines: [string, string][] = [
        ['Authorization', `Bearer ${stack.unreachableIssuerJwt}`],
        ['X-Tenant-Id', TEST_TENANT],
      ]
      const proxied = await send(front.url, PROTECTED_PATH, lines)
      const direct = await send(stack.gatewayUrl, PROTECTED_PATH, lines)
      assert.equal(direct.status, 503)
      assert.equal(stack.upstream.seen.length, seenBefore)
      if (!exact) return assert.equal(proxied.status, ingressStatus(503))
      assert.equal(proxied.status, 503, `${proxied.body}\n${front.log()}`)
      const { requestId, ...body } = JSON.parse(proxied.body) as Record<string, unknown>
      const { requestId: _, ...expected } = JSON.parse(direct.body) as Record<string, unknown>
      assert.deepEqual(body, expected)
      assert.equal(proxied.headers['x-request-id'], requestId)
      assert.equal(proxied.headers['retry-after'], direct.headers['retry-after'])
      assert.equal(proxied.headers['content-type'], direct.headers['content-type'])
    })

    test('a policy deny rule answers 404 like tokengate, for any method', async () => {
      const seenBefore = stack.upstream.seen.length
      const lines: [string, string][] = [['Authorization', `Bearer ${stack.tokens.pat}`]]
      const proxied = await send(front.url, '/api/v1/internal/x', lines)
      const direct = await send(stack.gatewayUrl, '/api/v1/internal/x', lines)
      assert.equal(direct.status, 404)
      assert.equal(stack.upstream.seen.length, seenBefore)
      if (!exact) return assert.equal(proxied.status, ingressStatus(404))
      assert.equal(proxied.status, 404, proxied.body)
      const { requestId: _a, ...body } = JSON.parse(proxied.body) as Record<string, unknown>
      const { requestId: _b, ...expected } = JSON.parse(direct.body) as Record<string, unknown>
      assert.deepEqual(body, expected)
    })
  })

  describe(`${proxy} → tokengate decision API: rate limits`, { skip: skipReason(binary) }, () => {
    let stack: Stack
    let front: ProxyProcess
    before(async () => {
      stack = await startStack({ proxy, perTokenMax: 2 })
      front = await start({ decision: stack.decisionPort, upstream: stack.upstream.port })
    })
    after(async () => {
      await front?.stop()
      await stack?.close()
    })

    test('the per-token limit answers 429 with Retry-After, RateLimit headers and the problem body', async () => {
      const lines: [string, string][] = [['Authorization', `Bearer ${stack.tokens.pat}`]]
      const first = await send(front.url, PROTECTED_PATH, lines)
      assert.equal(first.status, 200, first.body)
      if (exact) assert.equal(first.headers['ratelimit-policy'], '"per-token";q=2;w=60')
      await send(front.url, PROTECTED_PATH, lines)
      const seenBefore = stack.upstream.seen.length
      const limited = await send(front.url, PROTECTED_PATH, lines)
      assert.equal(stack.upstream.seen.length, seenBefore)
      if (!exact) return assert.equal(limited.status, ingressStatus(429))
      assert.equal(limited.status, 429, `${limited.body}\n${front.log()}`)
      const body = JSON.parse(limited.body) as Record<string, unknown>
      assert.equal(body.code, 'rate_limited')
      assert.equal(body.status, 429)
      assert.equal(body.policy, 'per-token')
      assert.equal(limited.headers['x-request-id'], body.requestId)
      assert.match(String(limited.headers['retry-after']), /^\d+$/)
      assert.equal(limited.headers['ratelimit-policy'], '"per-token";q=2;w=60')
      assert.match(String(limited.headers.ratelimit), /^"per-token";r=0;t=\d+$/)
      assert.equal(limited.headers['content-type'], 'application/problem+json; charset=utf-8')
    })
  })
}
