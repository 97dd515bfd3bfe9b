/**
 * How the gateway relays an upstream's answer, edge cases included: no content, HEAD,
 * repeated headers, an upstream header that overrides the gateway's default, and an
 * upstream that breaks off before or during the body. Real sockets on both sides.
 */
import assert from 'node:assert/strict'
import { createServer, request as httpRequest, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { type Gateway, startGateway } from './harness.ts'

interface Answer {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly body: Buffer
  /** The response ended early (the connection broke before its declared length). */
  readonly cut: boolean
}

function call(url: string, path: string, token: string, method = 'GET'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${url}${path}`,
      { method, headers: { authorization: `Bearer ${token}` } },
      (res) => {
        const chunks: Buffer[] = []
        let cut = false
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('aborted', () => {
          cut = true
        })
        res.on('error', () => {
          cut = true
        })
        res.on('close', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks),
            cut: cut || !res.complete,
          }),
        )
      },
    )
    req.on('error', reject)
    req.end()
  })
}

describe('gateway: relaying the upstream answer', () => {
  let upstream: ReturnType<typeof createServer>
  let gateway: Gateway
  let token: string
  before(async () => {
    upstream = createServer((req, res) => {
      switch (req.url) {
        case '/api/v1/no-content':
          res.writeHead(204, { 'content-type': 'application/json', 'x-kept': 'yes' }).end()
          return
        case '/api/v1/cookies':
          res.setHeader('set-cookie', ['a=1; Path=/', 'b=2; Path=/'])
          res.setHeader('cache-control', 'public, max-age=60')
          res.end('ok')
          return
        case '/api/v1/sized':
          res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '11' })
          res.end(req.method === 'HEAD' ? undefined : 'hello world')
          return
        case '/api/v1/cut-before-body':
          res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100' })
          res.flushHeaders()
          setTimeout(() => req.socket.destroy(), 20)
          return
        case '/api/v1/cut-mid-body':
          res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100000' })
          res.write(Buffer.alloc(10_000, 0x61))
          setTimeout(() => req.socket.destroy(), 20)
          return
        default:
          res.writeHead(404).end()
      }
    })
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
    const { port } = upstream.address() as AddressInfo
    gateway = await startGateway({ upstream: `http://127.0.0.1:${port}`, timeoutMs: 10_000 })
    token = await gateway.pat([])
  })
  after(async () => {
    await gateway.close()
    upstream.closeAllConnections()
    await new Promise<void>((resolve) => upstream.close(() => resolve()))
  })

  test('204 passes through without body headers, with the other headers', async () => {
    const answer = await call(gateway.url, '/api/v1/no-content', token)
    assert.equal(answer.status, 204)
    assert.equal(answer.headers['content-type'], undefined)
    assert.equal(answer.headers['content-length'], undefined)
    assert.equal(answer.headers['x-kept'], 'yes')
    assert.equal(answer.body.length, 0)
  })

  test('repeated Set-Cookie fields arrive as sent; the upstream’s Cache-Control wins', async () => {
    const answer = await call(gateway.url, '/api/v1/cookies', token)
    assert.equal(answer.status, 200)
    assert.deepEqual(answer.headers['set-cookie'], ['a=1; Path=/', 'b=2; Path=/'])
    assert.equal(answer.headers['cache-control'], 'public, max-age=60')
    assert.equal(answer.body.toString(), 'ok')
    assert.match(String(answer.headers['x-request-id']), /./)
  })

  test('GET keeps the upstream’s length; HEAD gets the length and no body', async () => {
    const get = await call(gateway.url, '/api/v1/sized', token)
    assert.equal(get.headers['content-length'], '11')
    assert.equal(get.body.toString(), 'hello world')
    const head = await call(gateway.url, '/api/v1/sized', token, 'HEAD')
    assert.equal(head.status, 200)
    assert.equal(head.headers['content-length'], '11')
    assert.equal(head.body.length, 0)
  })

  test('an upstream that breaks off before any body byte → 502 problem, no internals', async () => {
    const answer = await call(gateway.url, '/api/v1/cut-before-body', token)
    assert.equal(answer.status, 502)
    assert.match(answer.headers['content-type'] ?? '', /^application\/problem\+json/)
    assert.equal(answer.headers['content-length'], String(answer.body.length))
    const body = JSON.parse(answer.body.toString())
    assert.equal(body.code, 'bad_gateway')
    assert.doesNotMatch(answer.body.toString(), /UND_ERR|other side|socket/i)
    assert.equal(answer.cut, false)
  })

  test('an upstream that breaks off mid-body → the caller’s response is cut short', async () => {
    const answer = await call(gateway.url, '/api/v1/cut-mid-body', token)
    assert.equal(answer.status, 200)
    assert.equal(answer.cut, true)
    assert.ok(answer.body.length < 100_000)
    // The gateway itself still answers the next request.
    const next = await call(gateway.url, '/api/v1/sized', token)
    assert.equal(next.body.toString(), 'hello world')
  })
})
