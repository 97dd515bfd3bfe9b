import assert from 'node:assert/strict'
import { get, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import Fastify, { type FastifyReply } from 'fastify'
import { callerResponseHeaders, type HeaderMap } from '../../src/gateway/headers.ts'
import { writeRelayedHead } from '../../src/gateway/response-head.ts'

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

/** What the server's hooks put on the reply before the proxy relays. */
function ownHeaders(reply: FastifyReply, cookie: boolean): void {
  reply.header('x-request-id', 'the-gateway-id').header('x-shared', 'reply')
  reply.header('ratelimit-policy', '100;w=60')
  if (cookie) reply.header('set-cookie', 'own=1; Path=/').header('set-cookie', 'own=2; Path=/')
  reply.raw.setHeader('x-raw', 'set on the raw response')
}

describe('writeRelayedHead', () => {
  const app = Fastify()
  let origin = ''
  before(async () => {
    app.get('/composed', (request, reply) => {
      ownHeaders(reply, request.query !== null && 'cookie' in (request.query as object))
      // The composition it replaces (the proxy's until issue #36).
      reply.headers(callerResponseHeaders(UPSTREAM))
      reply.raw.writeHead(201, reply.getHeaders() as Record<string, string>)
      reply.raw.end('{}')
    })
    app.get('/one-pass', (request, reply) => {
      ownHeaders(reply, request.query !== null && 'cookie' in (request.query as object))
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

  for (const cookie of [false, true]) {
    test(`writes the same head as reply.headers + getHeaders, in the same order${cookie ? ' (Set-Cookie on both sides)' : ''}`, async () => {
      const query = cookie ? '?cookie' : ''
      const [composed, onePass] = await Promise.all([
        fetchHead(`/composed${query}`),
        fetchHead(`/one-pass${query}`),
      ])
      assert.equal(onePass.statusCode, 201)
      assert.deepEqual(sent(onePass), sent(composed))
    })
  }

  test('drops hop-by-hop fields and the upstream request id; the upstream wins, cookies join', async () => {
    const res = await fetchHead('/one-pass?cookie')
    assert.equal(res.headers['x-request-id'], 'the-gateway-id')
    assert.equal(res.headers['x-shared'], 'upstream')
    assert.equal(res.headers['x-upstream-only'], 'yes')
    assert.equal(res.headers['x-raw'], 'set on the raw response')
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
    // Node's own keep-alive and framing, not the upstream's.
    assert.notEqual(res.headers['keep-alive'], 'timeout=5')
    assert.equal(res.headers['transfer-encoding'], 'chunked')
    assert.equal(res.rawHeaders.filter((v) => v.toLowerCase() === 'transfer-encoding').length, 1)
  })
})
