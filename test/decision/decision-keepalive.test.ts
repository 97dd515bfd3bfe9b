/**
 * The decision hop reuses connections, through the real proxies with the shipped examples
 * (nginx.conf: `keepalive` in the decision upstream, HTTP/1.1 and an empty Connection header
 * in the auth location; Caddy's forward_auth keeps connections by default): a counting TCP
 * relay in front of the decision listener sees a handful of connections for hundreds of
 * decisions, sequential or concurrent. Without reuse it sees one per request, and the decision
 * listener pays an accept, a socket and a close each time.
 */
import assert from 'node:assert/strict'
import { createConnection, createServer, type Server, type Socket } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'
import { skipReason } from '../helpers/services.ts'
import { type ProxyProcess, type Stack, startCaddy, startNginx, startStack } from './harness.ts'

/** Relays 127.0.0.1:<port> to `target`, counting the connections it accepts. */
async function countingRelay(target: number): Promise<{
  port: number
  accepted(): number
  close(): Promise<void>
}> {
  let accepted = 0
  const sockets = new Set<Socket>()
  const server: Server = createServer((client) => {
    accepted++
    const upstream = createConnection({ host: '127.0.0.1', port: target })
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.once('close', () => sockets.delete(socket))
      socket.on('error', () => {})
    }
    client.pipe(upstream).pipe(client)
    client.once('close', () => upstream.destroy())
    upstream.once('close', () => client.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  return {
    port,
    accepted: () => accepted,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      }),
  }
}

const PROXIES = [
  { name: 'nginx', service: 'nginx', proxy: 'nginx', start: startNginx },
  { name: 'Caddy', service: 'caddy', proxy: 'caddy', start: startCaddy },
] as const

for (const { name, service, proxy, start } of PROXIES) {
  describe(`${name} reuses its connections to the decision listener`, {
    skip: skipReason(service),
  }, () => {
    let stack: Stack
    let relay: Awaited<ReturnType<typeof countingRelay>>
    let front: ProxyProcess
    before(async () => {
      stack = await startStack({ proxy })
      relay = await countingRelay(stack.decisionPort)
      front = await start({ decision: relay.port, upstream: stack.upstream.port })
    })
    after(async () => {
      await front?.stop()
      await relay?.close()
      await stack?.close()
    })

    const ask = async () => {
      const response = await rawRequest(front.url, PROTECTED_PATH, [
        ['Authorization', `Bearer ${stack.tokens.pat}`],
      ])
      assert.equal(response.status, 200, front.log())
    }

    test('200 sequential requests: one connection', async () => {
      const before = relay.accepted()
      for (let i = 0; i < 200; i++) await ask()
      const opened = relay.accepted() - before
      console.log(`${name}: 200 sequential decisions over ${opened} connection(s)`)
      assert.ok(opened <= 1, `${opened} connections for 200 decisions`)
    })

    test('400 requests, 16 at a time: at most 16 connections', async () => {
      const before = relay.accepted()
      for (let round = 0; round < 25; round++) await Promise.all(Array.from({ length: 16 }, ask))
      const opened = relay.accepted() - before
      console.log(`${name}: 400 concurrent decisions over ${opened} new connection(s)`)
      assert.ok(opened <= 16, `${opened} connections for 400 decisions`)
    })
  })
}

// nginx closes every idle connection beyond `keepalive` when a request ends: with fewer than
// the requests in flight, it opens and closes connections under steady load (issue #36).
describe('nginx keeps a connection for every request in flight', {
  skip: skipReason('nginx'),
}, () => {
  const CONCURRENCY = 32
  let stack: Stack
  let decision: Awaited<ReturnType<typeof countingRelay>>
  let upstream: Awaited<ReturnType<typeof countingRelay>>
  let front: ProxyProcess
  before(async () => {
    stack = await startStack({ proxy: 'nginx' })
    decision = await countingRelay(stack.decisionPort)
    upstream = await countingRelay(stack.upstream.port)
    front = await startNginx({ decision: decision.port, upstream: upstream.port })
  })
  after(async () => {
    await front?.stop()
    await upstream?.close()
    await decision?.close()
    await stack?.close()
  })

  test(`800 requests, ${CONCURRENCY} at a time: at most ${CONCURRENCY} connections to the decision listener and to the upstream`, async () => {
    const ask = async () => {
      const response = await rawRequest(front.url, PROTECTED_PATH, [
        ['Authorization', `Bearer ${stack.tokens.pat}`],
      ])
      assert.equal(response.status, 200, front.log())
    }
    for (let round = 0; round < 800 / CONCURRENCY; round++) {
      await Promise.all(Array.from({ length: CONCURRENCY }, ask))
    }
    const opened = { decision: decision.accepted(), upstream: upstream.accepted() }
    console.log(
      `nginx: 800 requests, ${CONCURRENCY} at a time: ${JSON.stringify(opened)} connections`,
    )
    assert.ok(opened.decision <= CONCURRENCY, `${opened.decision} connections to tokengate`)
    assert.ok(opened.upstream <= CONCURRENCY, `${opened.upstream} connections to the upstream`)
  })
})
