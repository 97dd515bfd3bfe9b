/**
 * `upstreamRequestHeaders` builds undici's flat header list in one pass (issue #36). It must
 * send exactly what the map it replaces sent: the same fields, values and order, for every mix
 * of hop-by-hop, spoofed, listed-in-`Connection`, cookie, authorization and gateway-set fields
 * (`Host`, `X-Request-Id`, forwarding fields the operator lets through), in any order.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import {
  connectionListed,
  type ForwardContext,
  type HeaderMap,
  HOP_BY_HOP,
  upstreamRequestHeaders,
} from '../../src/gateway/headers.ts'
import { withoutOwnCookies } from '../../src/http/own-cookies.ts'
import { isSpoofable } from '../../src/http/spoofable-headers.ts'

/** The composition it replaces (the gateway's until issue #36): a map, then `Host` set on it. */
function composedAsMap(incoming: HeaderMap, context: ForwardContext): [string, unknown][] {
  const listed = connectionListed(incoming.connection)
  const headers: HeaderMap = {}
  for (const name of Object.keys(incoming)) {
    if (HOP_BY_HOP.has(name) || name.startsWith('proxy-') || name === 'expect') continue
    if (isSpoofable(name, context.forwardHeaders) || listed?.has(name) === true) continue
    if (name === 'authorization' && context.stripAuthorization) continue
    if (name === 'cookie') {
      const kept = withoutOwnCookies(String(incoming.cookie))
      if (kept !== undefined) headers.cookie = kept
      continue
    }
    headers[name] = incoming[name]
  }
  Object.assign(headers, context.identity)
  headers['x-request-id'] = context.requestId
  headers['x-forwarded-for'] = context.forwardedFor
  headers['x-forwarded-proto'] = context.protocol
  if (context.forwardedHost) headers['x-forwarded-host'] = context.host
  headers.host = context.upstreamHost
  return Object.entries(headers)
}

function pairs(list: readonly unknown[]): [string, unknown][] {
  const out: [string, unknown][] = []
  for (let i = 0; i < list.length; i += 2) out.push([list[i] as string, list[i + 1]])
  return out
}

/** A caller's fields as Node hands them over: lower-case names, `Set-Cookie` as a list. */
const FIELDS: [string, string | string[]][] = [
  ['host', 'gateway.example'],
  ['user-agent', 'test/1'],
  ['accept', '*/*'],
  ['authorization', 'Bearer tg_secret'],
  ['cookie', 'a=1; __Host-tokengate-admin=op; b=2'],
  ['x-request-id', 'callers-id'],
  ['x-auth-tenant', 'spoofed'],
  ['x_auth_subject', 'spoofed'],
  ['x-forwarded-for', '203.0.113.9'],
  ['x-forwarded-host', 'evil.example'],
  ['x-forwarded-proto', 'gopher'],
  ['x-real-ip', '203.0.113.9'],
  ['x-http-method-override', 'DELETE'],
  ['expect', '100-continue'],
  ['te', 'trailers'],
  ['proxy-authorization', 'Basic x'],
  ['keep-alive', 'timeout=5'],
  ['x-custom', 'kept'],
  ['set-cookie', ['odd=1', 'odd=2']],
  ['content-type', 'application/json'],
]
const CONNECTIONS = [undefined, 'keep-alive', 'close', 'x-custom', 'x-request-id, Host', 'upgrade']
const FORWARDING = [
  undefined,
  new Set(['x-forwarded-for', 'x-forwarded-host']),
  new Set(['x-forwarded-host', 'x-forwarded-proto', 'x-real-ip']),
]

/** A small deterministic generator, so a failure names a case that can be run again. */
function random(seed: number): () => number {
  let state = seed >>> 0 || 1
  return () => {
    state ^= state << 13
    state ^= state >>> 17
    state ^= state << 5
    return (state >>> 0) / 2 ** 32
  }
}

describe('upstreamRequestHeaders', () => {
  test('sends what the map composition sent, field for field and in order (2,000 cases)', () => {
    for (let seed = 1; seed <= 2000; seed++) {
      const next = random(seed)
      const chosen = FIELDS.filter(() => next() < 0.6)
      for (let i = chosen.length - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1))
        ;[chosen[i], chosen[j]] = [chosen[j] as [string, string], chosen[i] as [string, string]]
      }
      const incoming: HeaderMap = Object.fromEntries(chosen)
      const connection = CONNECTIONS[Math.floor(next() * CONNECTIONS.length)]
      if (connection !== undefined) incoming.connection = connection
      const context: ForwardContext = {
        identity: Object.freeze({
          'x-auth-tenant': 'acme',
          'x-auth-subject': 'user-1',
          ...(next() < 0.5 ? { 'x-auth-token': 'signed.jwt.here' } : {}),
        }),
        requestId: 'gateway-id',
        stripAuthorization: next() < 0.5,
        forwardedFor: next() < 0.5 ? '127.0.0.1' : '198.51.100.1, 127.0.0.1',
        protocol: 'http',
        host: 'gateway.example',
        forwardHeaders: FORWARDING[Math.floor(next() * FORWARDING.length)],
        forwardedHost: next() < 0.5,
        upstreamHost: 'upstream.internal:8080',
      }
      const before = JSON.stringify(incoming)
      const list = upstreamRequestHeaders(incoming, context)
      assert.deepEqual(pairs(list), composedAsMap(incoming, context), `seed ${seed}`)
      assert.equal(JSON.stringify(incoming), before, `seed ${seed}: incoming unchanged`)
    }
  })

  test('a spoofed identity field never passes, nor an inherited one; each gateway field is sent once', () => {
    const list = upstreamRequestHeaders(
      {
        'x-request-id': 'callers-id',
        host: 'gateway.example',
        'x-auth-tenant': 'spoofed',
        x_auth_tenant: 'spoofed',
        'x-forwarded-for': '203.0.113.9',
      },
      {
        // Only the identity's own fields, as `Object.assign` copied them.
        identity: Object.assign(Object.create({ 'x-auth-inherited': 'no' }), {
          'x-auth-tenant': 'acme',
        }),
        requestId: 'gateway-id',
        stripAuthorization: true,
        forwardedFor: '127.0.0.1',
        protocol: 'https',
        host: 'gateway.example',
        forwardHeaders: new Set(['x-forwarded-for']),
        forwardedHost: false,
        upstreamHost: 'upstream.internal',
      },
    )
    assert.deepEqual(pairs(list), [
      ['x-request-id', 'gateway-id'],
      ['host', 'upstream.internal'],
      ['x-forwarded-for', '127.0.0.1'],
      ['x-auth-tenant', 'acme'],
      ['x-forwarded-proto', 'https'],
    ])
  })
})
