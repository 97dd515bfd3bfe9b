/**
 * Connection caps fitted to the file-descriptor limit (issue #25), on a real `serve` process
 * started under `prlimit`: with RLIMIT_NOFILE 256 and the default caps (4096 in all, 256 per
 * address), one client holding idle sockets used every descriptor and nobody else was served.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnServe } from '../../helpers/serve-process.ts'
import { freePort } from '../../helpers/services.ts'
import { tempDir } from '../../helpers/temp-dir.ts'

function prlimitAvailable(): string | false {
  try {
    execFileSync('prlimit', ['--version'], { stdio: 'ignore' })
    return false
  } catch {
    if (process.env.CI === 'true') throw new Error('CI=true but prlimit (util-linux) is missing')
    return 'prlimit (util-linux) unavailable'
  }
}

/** `serve --dev --http` under `prlimit --nofile=SOFT:HARD`; resolves once it listens. */
async function serveLimited(soft: number, hard: number, config?: object) {
  const dir = tempDir('tg-nofile-')
  const file = join(dir, 'tokengate.json')
  if (config) writeFileSync(file, JSON.stringify(config))
  const served = await spawnServe({
    env: {
      TOKENGATE_DATA_DIR: join(dir, 'data'),
      TOKENGATE_LOG_LEVEL: 'warn',
      ...(config ? { TOKENGATE_CONFIG: file } : {}),
    },
    wrap: ['prlimit', `--nofile=${soft}:${hard}`, '--'],
  })
  return { ...served, port: Number(new URL(served.url).port) }
}

/** Opens a socket from `localAddress`; resolves once connected, or false if refused/closed. */
function open(port: number, localAddress: string): Promise<Socket | false> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress })
    socket.once('connect', () => resolve(socket))
    socket.once('error', () => resolve(false))
    socket.setTimeout(2000, () => {
      socket.destroy()
      resolve(false)
    })
  })
}

/** One GET /healthz from `localAddress` on its own connection: its status, or 0. */
function healthz(port: number, localAddress: string): Promise<number> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress })
    let reply = ''
    socket.setTimeout(3000, () => socket.destroy())
    socket.on('connect', () =>
      socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
    )
    socket.on('data', (chunk) => {
      reply += chunk.toString()
    })
    socket.on('error', () => {})
    socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(reply)?.[1] ?? 0)))
  })
}

describe('connection caps fit the descriptor limit', { skip: prlimitAvailable() }, () => {
  const sockets: Socket[] = []
  after(() => {
    for (const socket of sockets) socket.destroy()
  })

  it('RLIMIT_NOFILE 256: one client holding 300 idle sockets does not lock anyone else out', async () => {
    const server = await serveLimited(256, 256)
    try {
      // The hog connects from 127.0.0.1 and keeps every socket it gets.
      for (let i = 0; i < 300; i++) {
        const socket = await open(server.port, '127.0.0.1')
        if (socket) sockets.push(socket)
      }
      await sleep(200)
      // Another client (another loopback address) is still served.
      const statuses = []
      for (let i = 0; i < 5; i++) statuses.push(await healthz(server.port, '127.0.0.2'))
      assert.deepEqual(statuses, [200, 200, 200, 200, 200], server.stderr())
      const warning = server
        .stderr()
        .split('\n')
        .find((line) => line.includes('do not fit the file-descriptor limit'))
      assert.ok(warning, server.stderr())
      const logged = JSON.parse(warning) as {
        maxConnections: number
        maxConnectionsPerAddress: number
      }
      assert.ok(
        logged.maxConnections < 256 && logged.maxConnectionsPerAddress < logged.maxConnections,
      )
    } finally {
      for (const socket of sockets.splice(0)) socket.destroy()
      await server.stop()
    }
  })

  // Descriptors are the process's, not a listener's: sockets held on the decision listener or
  // the gRPC port used to take them from the API listener's clients.
  for (const listener of ['decision', 'grpc', 'metrics', 'admin'] as const) {
    it(`RLIMIT_NOFILE 256: 300 idle sockets on the ${listener} port do not lock the API's clients out`, async () => {
      const ports = {
        decision: await freePort(),
        grpc: await freePort(),
        metrics: await freePort(),
        admin: await freePort(),
      }
      const server = await serveLimited(256, 256, {
        decision: {
          port: ports.decision,
          grpcPort: ports.grpc,
          proxy: 'envoy',
          trustedProxies: ['127.0.0.1'],
        },
        metrics: { enabled: true, port: ports.metrics },
        admin: { enabled: true, port: ports.admin },
      })
      try {
        const port = ports[listener]
        for (let i = 0; i < 300; i++) {
          const socket = await open(port, '127.0.0.1')
          if (socket) sockets.push(socket)
        }
        await sleep(200)
        const statuses = []
        for (let i = 0; i < 5; i++) statuses.push(await healthz(server.port, '127.0.0.2'))
        assert.deepEqual(statuses, [200, 200, 200, 200, 200], server.stderr().slice(-2000))
      } finally {
        for (const socket of sockets.splice(0)) socket.destroy()
        await server.stop()
      }
    })
  }

  it('the soft limit is raised to the hard limit at start (Node does it), and then nothing shrinks', async () => {
    const server = await serveLimited(256, 8192)
    try {
      const limits = readFileSync(`/proc/${server.child.pid}/limits`, 'utf8')
      assert.match(limits, /Max open files\s+8192\s+8192/)
      assert.doesNotMatch(server.stderr(), /file-descriptor limit/)
    } finally {
      await server.stop()
    }
  })
})
