import assert from 'node:assert/strict'
import { get, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import Fastify, { type FastifyReply } from 'fastify'
import { callerResponseHeaders, type HeaderMap } from '../../src/gateway/headers.ts'
import { replyHeaderMap, writeRelayedHead } from '../../src/gateway/response-head.ts'

/** An upstream's head as undici hands it over: lower-case names, repeats as arrays. */
const UPSTREAM: HeaderMap = {
  connection: 'keep-alive, x-listed',
  'keep-alive': 'timeout=5',
  'x-listed': 'hop-by-hop because Connection names it',
  'proxy-authenticate': 'Basic',
  'transfer-encoding': 'chunked',
  'x-request-id': 'the-upstream-id',
  'content-type': 'application/json',
  'set-cookie': ['a=1; Path=/', 'b=2; Path=/'],
  'x-shared': 'upstream',
  'x-upstream-only': 'yes',
}

/** What the server's hooks put on the reply before the proxy relays (`raw`: on its raw response too). */
function ownHeaders(reply: FastifyReply, cookie: boolean, raw = true): void {
  reply.header('x-request-id', 'the-gateway-id').header('x-shared', 'reply')
  reply.header('ratelimit-policy', '100;w=60')
  if (cookie) reply.header('set-cookie', 'own=1; Path=/').header('set-cookie', 'own=2; Path=/')
  if (raw) reply.raw.setHeader('x-raw', 'set on the raw response')
}

/** The gateway's usual case: nothing set on the raw response, the reply's map read directly. */
const options = (query: unknown) => {
  const q = (query ?? {}) as Record<string, string>
  return { cookie: 'cookie' in q, raw: !('noraw' in q) }
}

describe('writeRelayedHead', () => {
  const app = Fastify()
  let origin = ''
  before(async () => {
    app.get('/composed', (request, reply) => {
      const { cookie, raw } = options(request.query)
      ownHeaders(reply, cookie, raw)
      // The composition it replaces (the proxy's until issue #36).
      reply.headers(callerResponseHeaders(UPSTREAM))
      reply.raw.writeHead(201, reply.getHeaders() as Record<string, string>)
      reply.raw.end('{}')
    })
    app.get('/one-pass', (request, reply) => {
      const { cookie, raw } = options(request.query)
      ownHeaders(reply, cookie, raw)
      reply.code(201)
      reply.raw.statusCode = 201
      writeRelayedHead(reply, UPSTREAM)
      reply.raw.end('{}')
    })
    await app.listen({ host: '127.0.0.1', port: 0 })
    origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  })
  after(() => app.close())

  const fetchHead = (path: string) =>
    new Promise<IncomingMessage>((resolve, reject) => {
      get(`${origin}${path}`, (res) => {
        res.resume()
        res.on('end', () => resolve(res))
      }).on('error', reject)
    })
  // Every field as sent, but the date (the two answers are not sent in the same second).
  const sent = (res: IncomingMessage) =>
    res.rawHeaders.flatMap((value, i, all) =>
      i % 2 === 1 && all[i - 1] !== 'Date' ? [`${all[i - 1]}: ${value}`] : [],
    )

  for (const [cookie, raw] of [
    [false, true],
    [true, true],
    [false, false],
    [true, false],
  ]) {
    test(`writes the same head as reply.headers + getHeaders, in the same order${cookie ? ' (Set-Cookie on both sides)' : ''}${raw ? ' (a raw header)' : " (the reply's map only)"}`, async () => {
      const query = `?${cookie ? 'cookie&' : ''}${raw ? '' : 'noraw'}`
      const [composed, onePass] = await Promise.all([
        fetchHead(`/composed${query}`),
        fetchHead(`/one-pass${query}`),
      ])
      assert.equal(onePass.statusCode, 201)
      assert.deepEqual(sent(onePass), sent(composed))
    })
  }

  test("reads the pinned Fastify's own header map (else every relay takes getHeaders' copies)", async () => {
    const app = Fastify()
    let seen: unknown
    app.get('/', (_request, reply) => {
      ownHeaders(reply, true, false)
      seen = { map: { ...replyHeaderMap(reply) }, public: reply.getHeaders() }
      return 'ok'
    })
    await app.inject('/')
    await app.close()
    const { map, public: expected } = seen as Record<string, unknown>
    assert.ok(Object.keys(map as object).length > 0, 'the symbol was not found')
    assert.deepEqual(map, { ...(expected as object) })
  })

  for (const query of ['?cookie', '?cookie&noraw']) {
    test(`drops hop-by-hop fields and the upstream request id; the upstream wins, cookies join (${query})`, async () => {
      const res = await fetchHead(`/one-pass${query}`)
      assert.equal(res.headers['x-request-id'], 'the-gateway-id')
      assert.equal(res.headers['x-shared'], 'upstream')
      assert.equal(res.headers['x-upstream-only'], 'yes')
      assert.equal(
        res.headers['x-raw'],
        query.includes('noraw') ? undefined : 'set on the raw response',
      )
      assert.equal(res.headers['ratelimit-policy'], '100;w=60')
      assert.deepEqual(res.headers['set-cookie'], [
        'own=1; Path=/',
        'own=2; Path=/',
        'a=1; Path=/',
        'b=2; Path=/',
      ])
      for (const name of ['x-listed', 'proxy-authenticate']) {
        assert.equal(res.headers[name], undefined, name)
      }
      assert.notEqual(res.headers['keep-alive'], 'timeout=5')
      assert.equal(res.headers['transfer-encoding'], 'chunked')
      assert.equal(res.rawHeaders.filter((v) => v.toLowerCase() === 'transfer-encoding').length, 1)
    })
  }
})
