/**
 * #11 item 5: idle zero-byte sockets are closed after the first-byte timeout, and total and
 * per-address connection caps keep a flood of idle sockets from locking real clients out.
 * Raw TCP sockets against the running HTTPS listener (small limits in the test config).
 */
import assert from 'node:assert/strict'
import net from 'node:net'
import { after, before, describe, it } from 'node:test'
import tls from 'node:tls'
import { startTestServer, type TestServer } from '../../helpers/server.ts'

const FIRST_BYTE_MS = 600
const PER_ADDRESS = 4
const TOTAL = 10

interface Idle {
  readonly socket: net.Socket
  closed: boolean
}

function openIdle(port: number, localAddress: string): Promise<Idle> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress }, () => resolve(idle))
    const idle: Idle = { socket, closed: false }
    socket.on('close', () => {
      idle.closed = true
    })
    socket.on('error', (error) => (idle.closed ? undefined : reject(error)))
  })
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('connection limits', () => {
  let server: TestServer
  let pat: string
  const sockets: Idle[] = []
  before(async () => {
    server = await startTestServer({
      server: {
        port: 0,
        firstByteTimeoutMs: FIRST_BYTE_MS,
        maxConnections: TOTAL,
        maxConnectionsPerAddress: PER_ADDRESS,
      },
    })
    pat = server.running.devSeed?.demoPat as string
  })
  after(async () => {
    for (const idle of sockets) idle.socket.destroy()
    await server.close()
  })

  it('closes sockets beyond the per-address cap; another address still gets its answer', async () => {
    const flood = await Promise.all(
      Array.from({ length: PER_ADDRESS * 3 }, () => openIdle(server.port, '127.0.0.2')),
    )
    sockets.push(...flood)
    await sleep(200)
    const closed = flood.filter((s) => s.closed).length
    assert.equal(closed, PER_ADDRESS * 2, `${closed} of ${flood.length} closed`)
    const me = await server.request('/api/v1/me', ['Authorization', `Bearer ${pat}`])
    assert.equal(me.status, 200)
  })

  it('closes zero-byte sockets, and TLS sockets that never send a request, after the first-byte timeout', async () => {
    const zero = await openIdle(server.port, '127.0.0.3')
    const handshaken = tls.connect({
      host: '127.0.0.1',
      port: server.port,
      ca: server.ca,
      servername: 'localhost',
    })
    let tlsClosed = false
    handshaken.on('close', () => {
      tlsClosed = true
    })
    handshaken.on('error', () => {})
    await new Promise((resolve) => handshaken.once('secureConnect', resolve))
    sockets.push(zero)
    // Generous against a busy machine, far below Node's 120 s handshake default.
    const deadline = Date.now() + FIRST_BYTE_MS + 5_000
    while ((!zero.closed || !tlsClosed) && Date.now() < deadline) await sleep(50)
    assert.ok(zero.closed, 'zero-byte socket still open')
    assert.ok(tlsClosed, 'idle TLS socket still open')
    assert.ok(
      sockets.every((s) => s.closed),
      'flood sockets still open',
    )
  })

  it('closes sockets beyond the total cap, and serves again once idle ones time out', async () => {
    const flood: Idle[] = []
    for (let i = 0; i < TOTAL + 4; i++) {
      flood.push(await openIdle(server.port, `127.0.1.${i + 1}`))
    }
    sockets.push(...flood)
    await sleep(200)
    const closed = flood.filter((s) => s.closed).length
    assert.ok(closed >= 4, `${closed} of ${flood.length} closed`)
    await sleep(FIRST_BYTE_MS + 1_500)
    const me = await server.request('/api/v1/me', ['Authorization', `Bearer ${pat}`])
    assert.equal(me.status, 200)
  })
})
