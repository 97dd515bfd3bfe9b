/**
 * All listeners or none: when one listener cannot start (its port is taken), `serve` exits
 * non-zero with one line naming it, and an embedding caller of `startTokengate` gets a
 * rejection with every listener already up closed again. Never half-started: a process whose
 * /healthz answers 200 while its console or decision API is missing, which no supervisor
 * notices.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import net, { type AddressInfo } from 'node:net'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { after, before, describe, it } from 'node:test'
import { loadConfig } from '../../src/config/load.ts'
import { startTokengate } from '../../src/main.ts'
import { needsSources, runTokengate } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'

/** Each listener besides the API's, configured on `port`, and how the failure names it. */
const LISTENERS: readonly [string, (port: number) => Record<string, unknown>, RegExp][] = [
  [
    'admin',
    (port) => ({ admin: { enabled: true, port } }),
    /admin listener \(admin\.host, admin\.port\) cannot listen on /,
  ],
  [
    'decision',
    (port) => ({ decision: { port, proxy: 'nginx' } }),
    /decision listener \(decision\.host, decision\.port\) cannot listen on /,
  ],
  [
    'metrics',
    (port) => ({ metrics: { enabled: true, port } }),
    /metrics listener \(metrics\.host, metrics\.port\) cannot listen on /,
  ],
  [
    'decision gRPC',
    (port) => ({ decision: { port: 0, grpcPort: port, proxy: 'envoy' } }),
    /decision gRPC listener \(decision\.host, decision\.grpcPort\) cannot listen on /,
  ],
  [
    'second decision',
    (port) => ({ decision: { port: 0, proxy: 'nginx', listeners: [{ port, proxy: 'caddy' }] } }),
    /decision listener for caddy \(decision\.listeners\[0\]\.port\) cannot listen on /,
  ],
]

describe('a listener that cannot start', () => {
  let blocker: net.Server
  let taken = 0
  before(async () => {
    blocker = net.createServer()
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
    taken = (blocker.address() as AddressInfo).port
  })
  after(() => new Promise<void>((resolve) => blocker.close(() => resolve())))

  const base = () => ({
    dev: true,
    dataDir: tempDir('tg-start-failure-'),
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
  })

  for (const [name, configure, named] of LISTENERS) {
    it(`serve with the ${name} port taken exits 1 with one line naming the ${name} listener`, async () => {
      const dir = tempDir('tg-start-failure-config-')
      const file = join(dir, 'tokengate.json')
      writeFileSync(file, JSON.stringify({ ...base(), ...configure(taken) }))
      const { code, stderr } = await runTokengate(['serve', '--config', file], {
        timeoutMs: 30_000,
      }).catch((error: Error) => assert.fail(`serve kept running half-started: ${error.message}`))
      assert.equal(code, 1, stderr)
      const failure = stderr.split('\n').filter((line) => line.startsWith('tokengate:'))
      assert.equal(failure.length, 1, stderr)
      assert.match(failure[0] as string, /^tokengate: serve failed: /)
      assert.match(failure[0] as string, named)
      assert.match(
        failure[0] as string,
        new RegExp(`cannot listen on 127\\.0\\.0\\.1:${taken}: address already in use$`),
      )
      assert.doesNotMatch(stderr, /\n\s+at /, 'no stack trace')
    })
  }

  it('with two workers, a worker whose admin port is taken stops the whole pool: exit 1, one line', async () => {
    const file = join(tempDir('tg-start-failure-config-'), 'tokengate.json')
    writeFileSync(file, JSON.stringify({ ...base(), admin: { enabled: true, port: taken } }))
    const { code, stderr } = await runTokengate(['serve', '--config', file], {
      env: { TOKENGATE_WORKERS: '2' },
      timeoutMs: 30_000,
    }).catch((error: Error) => assert.fail(`serve kept running half-started: ${error.message}`))
    assert.equal(code, 1, stderr)
    assert.match(
      stderr,
      new RegExp(
        `^tokengate: serve failed: admin listener \\(admin\\.host, admin\\.port\\) cannot listen on 127\\.0\\.0\\.1:${taken}: address already in use\n$`,
      ),
    )
  })

  it('startTokengate rejects and closes the API listener it had opened', {
    skip: needsSources('an embedding caller of startTokengate'),
  }, async () => {
    const lines: string[] = []
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(...String(chunk).split('\n').filter(Boolean))
        done()
      },
    })
    const config = loadConfig({
      env: {},
      overrides: { ...base(), admin: { enabled: true, port: taken } },
    })
    await assert.rejects(startTokengate(config, { logDestination: sink }), /admin listener/)
    const api = lines
      .map((line) => /"msg":"listening on https:\/\/127\.0\.0\.1:(\d+)/.exec(line)?.[1])
      .find(Boolean)
    assert.ok(api, lines.join('\n'))
    // The log's last line says the start failed: the "listening on" line above is void.
    const last = JSON.parse(lines.at(-1) as string) as {
      level: number
      msg: string
      reason: string
    }
    assert.equal(last.level, 50)
    assert.match(last.msg, /^start failed: every listener that had started is closed again/)
    assert.match(last.reason, /admin listener/)
    const refused = await new Promise<boolean>((resolve) => {
      const socket = net.connect(Number(api), '127.0.0.1')
      socket.once('connect', () => {
        socket.destroy()
        resolve(false)
      })
      socket.once('error', () => resolve(true))
    })
    assert.equal(refused, true, 'the API listener is still open')
  })
})
