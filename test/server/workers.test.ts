/**
 * `server.workers`: a real `tokengate serve` with two node:cluster workers, driven over
 * sockets. Every request opens its own connection, so the primary's round-robin hands
 * consecutive requests to different workers; the workers' request log lines (pino's `pid`)
 * show which worker answered.
 */
import assert from 'node:assert/strict'
import type { ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { ConfigError, loadConfig } from '../../src/config/load.ts'
import { DEV_ISSUER } from '../../src/dev/issuer.ts'
import {
  configForWorkers,
  servedWorkerFlags,
  startWorkerPool,
  workerCount,
} from '../../src/server/workers.ts'
import { cli, cliJson, tempDataDir } from '../cli/helpers.ts'
import { serveProcess } from '../helpers/launch.ts'
import { freePort } from '../helpers/services.ts'

interface LogLine {
  readonly pid: number
  readonly msg: string
  readonly status?: number
  readonly code?: string
}

interface Served {
  readonly child: ChildProcess
  readonly url: string
  readonly metricsUrl: string
  readonly log: LogLine[]
  readonly stderr: () => string
  readonly exited: Promise<number | null>
}

async function serveWithWorkers(dataDir: string, configFile: string): Promise<Served> {
  const log: LogLine[] = []
  const served = await serveProcess(
    ['serve', '--dev', '--http', '--listen', '127.0.0.1:0', '--json'],
    {
      env: {
        TOKENGATE_CONFIG: configFile,
        TOKENGATE_DATA_DIR: dataDir,
        TOKENGATE_WORKERS: '2',
        TOKENGATE_LOG_LEVEL: 'info',
        TOKENGATE_METRICS_ENABLED: 'true',
        TOKENGATE_METRICS_PORT: '0',
      },
      logDestination: { write: (line: string) => log.push(JSON.parse(line) as LogLine) },
    },
  )
  const { url, metricsUrl } = served.document
  assert.ok(metricsUrl)
  return { child: served.child, url, metricsUrl, log, stderr: served.stderr, exited: served.exited }
}

function get(
  url: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    // agent: false: a connection per request, so the primary spreads them over the workers.
    const req = http.request(url, { method, headers, agent: false }, (res) => {
      let body = ''
      res.on('data', (chunk: Buffer) => {
        body += chunk.toString()
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

/** One request on its own connection, so the primary's round-robin picks the worker. */
function request(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string },
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method: options.method ?? 'GET', headers: options.headers, agent: false },
      (res) => {
        let body = ''
        res.on('data', (chunk: Buffer) => {
          body += chunk.toString()
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
      },
    )
    req.on('error', reject)
    req.end(options.body)
  })
}

/** Sends `count` requests one after another; returns their statuses and the answering pids. */
async function batch(
  served: Served,
  path: string,
  token: string,
  count: number,
  headers: Record<string, string> = {},
) {
  const start = served.log.length
  const statuses: number[] = []
  for (let i = 0; i < count; i++) {
    statuses.push(
      (await get(served.url + path, { authorization: `Bearer ${token}`, ...headers })).status,
    )
  }
  for (let i = 0; i < 100 && requestLines(served, start).length < count; i++) await sleep(20)
  const lines = requestLines(served, start)
  return { statuses, pids: new Set(lines.map((line) => line.pid)), lines }
}

function requestLines(served: Served, from: number): LogLine[] {
  return served.log.slice(from).filter((line) => line.msg === 'request')
}

const isReload = (line: LogLine) => line.msg === 'gateway policy reloaded'

function workerPids(served: Served): Set<number> {
  return new Set(served.log.filter((l) => l.msg.startsWith('listening on')).map((l) => l.pid))
}

async function issuePat(dataDir: string, permissions: string[]) {
  return cliJson<{ token: string; id: string }>(
    [
      'pat',
      'issue',
      '--tenant',
      'demo',
      '--subject',
      'workers-test',
      ...permissions.flatMap((p) => ['--permission', p]),
    ],
    { dataDir },
  )
}

function counter(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`))
  return line ? Number(line.split(' ').at(-1)) : 0
}

describe('server.workers = 2 (real processes)', { timeout: 120_000 }, () => {
  const data = tempDataDir()
  const policyFile = join(data.dir, 'policy.yaml')
  let served: Served
  let upstream: http.Server
  let adminPort: number
  let decisionPort: number
  before(async () => {
    upstream = http.createServer((_req, res) => res.end('{}'))
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
    const upstreamPort = (upstream.address() as AddressInfo).port
    adminPort = await freePort()
    decisionPort = await freePort()
    writeFileSync(policyFile, 'default: authenticated\n')
    // A long cache TTL: a revoke that did not reach a worker would keep answering 200 from
    // its cache for the whole test, so only change detection can turn it into a 401.
    const configFile = join(data.dir, 'config.json')
    writeFileSync(
      configFile,
      JSON.stringify({
        auth: { lookupCacheTtlMs: 600_000 },
        gateway: { upstream: `http://127.0.0.1:${upstreamPort}`, policyFile },
        admin: { enabled: true, host: '127.0.0.1', port: adminPort },
        decision: { host: '127.0.0.1', port: decisionPort, proxy: 'envoy' },
      }),
    )
    served = await serveWithWorkers(data.dir, configFile)
  })
  after(async () => {
    if (served?.child.exitCode === null) served.child.kill('SIGKILL')
    upstream?.close()
    data.cleanup()
  })

  it('serves requests from both workers', async () => {
    const { token } = await issuePat(data.dir, [])
    const { statuses, pids } = await batch(served, '/api/v1/me', token, 12)
    assert.deepEqual(new Set(statuses), new Set([200]))
    assert.equal(pids.size, 2, `answering pids: ${[...pids]}`)
    assert.deepEqual(pids, workerPids(served))
    assert.ok(!pids.has(served.child.pid as number), 'the primary serves no requests')
  })

  it("every worker runs with the one-process serve's heap bounds (semi-spaces, old-space growth)", () => {
    const pids = workerPids(served)
    assert.equal(pids.size, 2)
    for (const pid of pids) {
      const flags = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
      assert.ok(flags.includes('--max-semi-space-size=8'), `worker ${pid}: ${flags.join(' ')}`)
      assert.ok(flags.includes('--heap-growing-percent=50'), `worker ${pid}: ${flags.join(' ')}`)
    }
  })

  it('a revoke by the CLI on the same SQLite file reaches every worker within a second', async () => {
    const { token, id } = await issuePat(data.dir, [])
    const warm = await batch(served, '/api/v1/me', token, 8)
    assert.deepEqual(new Set(warm.statuses), new Set([200]))
    assert.equal(warm.pids.size, 2)
    await cliJson(['pat', 'revoke', id], { dataDir: data.dir })
    await sleep(1000)
    const { statuses, pids } = await batch(served, '/api/v1/me', token, 8)
    assert.deepEqual(new Set(statuses), new Set([401]))
    assert.equal(pids.size, 2)
  })

  it('a revoke through DELETE /api/v1/tokens/{id} on one worker reaches the other within a second', async () => {
    const { token, id } = await issuePat(data.dir, ['tokens:revoke'])
    const warm = await batch(served, '/api/v1/me', token, 8)
    assert.deepEqual(new Set(warm.statuses), new Set([200]))
    assert.equal(warm.pids.size, 2)
    const start = served.log.length
    const deleted = await get(
      `${served.url}/api/v1/tokens/${id}`,
      { authorization: `Bearer ${token}` },
      'DELETE',
    )
    assert.equal(deleted.status, 200, deleted.body)
    for (let i = 0; i < 50 && requestLines(served, start).length === 0; i++) await sleep(20)
    const revokedBy = requestLines(served, start)[0]?.pid
    assert.ok(revokedBy !== undefined)
    await sleep(1000)
    const { statuses, lines } = await batch(served, '/api/v1/me', token, 8)
    assert.deepEqual(new Set(statuses), new Set([401]))
    assert.ok(
      lines.some((line) => line.pid !== revokedBy),
      'the worker that did not serve the DELETE answered too',
    )
  })

  it("a key's quota holds across both workers: exactly its uses are served, never more", async () => {
    const { token } = await cliJson<{ token: string }>(
      ['pat', 'issue', '--tenant', 'demo', '--subject', 'quota-workers', '--quota', '20'],
      { dataDir: data.dir },
    )
    const { statuses, pids } = await batch(served, '/api/v1/me', token, 30)
    assert.equal(pids.size, 2, 'both workers answered')
    assert.deepEqual(
      [statuses.filter((s) => s === 200).length, statuses.filter((s) => s === 429).length],
      [20, 10],
    )
  })

  it('a JWT revoked by the CLI (jwt revoke --sub) is refused by every worker within a second, cached ones too', async () => {
    const minted = await cli(
      ['jwt', 'mint', '--dev', '--tenant', 'demo', '--subject', 'workers-jwt'],
      { dataDir: data.dir },
    )
    assert.equal(minted.code, 0, minted.stderr)
    const jwt = minted.stdout.trim()
    const demo = { 'x-tenant-id': 'demo' }
    const warm = await batch(served, '/api/v1/me', jwt, 8, demo)
    assert.deepEqual(new Set(warm.statuses), new Set([200]))
    assert.equal(warm.pids.size, 2)
    const revoked = await cli(['jwt', 'revoke', '--issuer', DEV_ISSUER, '--sub', 'workers-jwt'], {
      dataDir: data.dir,
    })
    assert.equal(revoked.code, 0, revoked.stderr)
    await sleep(1000)
    const { statuses, pids } = await batch(served, '/api/v1/me', jwt, 8, demo)
    assert.deepEqual(new Set(statuses), new Set([401]))
    assert.equal(pids.size, 2)
  })

  it('a key disabled by the CLI is refused by every worker within a second', async () => {
    const { token, id } = await issuePat(data.dir, [])
    const warm = await batch(served, '/api/v1/me', token, 6)
    assert.deepEqual(new Set(warm.statuses), new Set([200]))
    await cliJson(['pat', 'disable', id], { dataDir: data.dir })
    await sleep(1000)
    const { statuses, pids } = await batch(served, '/api/v1/me', token, 6)
    assert.deepEqual(new Set(statuses), new Set([401]))
    assert.equal(pids.size, 2)
  })

  it('/metrics in the primary sums the requests of both workers', async () => {
    const { token } = await issuePat(data.dir, [])
    const name = 'tokengate_http_requests_total'
    const before = counter((await get(served.metricsUrl)).body, name, 'code="ok",status="200"')
    const { pids } = await batch(served, '/api/v1/me', token, 10)
    assert.equal(pids.size, 2)
    const after = counter((await get(served.metricsUrl)).body, name, 'code="ok",status="200"')
    assert.equal(after - before, 10)
  })

  it('a killed worker is replaced and service continues', async () => {
    const { token } = await issuePat(data.dir, [])
    const victim = [...workerPids(served)][0] as number
    process.kill(victim, 'SIGKILL')
    for (let i = 0; i < 400 && workerPids(served).size < 3; i++) await sleep(25)
    const pids = workerPids(served)
    assert.equal(pids.size, 3, `a replacement started: ${served.stderr()}`)
    assert.match(served.stderr(), new RegExp(`worker ${victim} exited \\(signal SIGKILL\\)`))
    const after = await batch(served, '/api/v1/me', token, 8)
    assert.deepEqual(new Set(after.statuses), new Set([200]))
    assert.equal(after.pids.size, 2)
    assert.ok(!after.pids.has(victim))
  })

  it('a console session holds on every connection: one worker serves the admin listener', async () => {
    const { token } = await cliJson<{ token: string }>(
      ['admin', 'token', 'issue', '--name', 'ops', '--role', 'operator'],
      { dataDir: data.dir },
    )
    const origin = `http://127.0.0.1:${adminPort}`
    const signIn = await request(`${origin}/admin/sign-in`, {
      method: 'POST',
      headers: { origin, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ credential: token }).toString(),
    })
    assert.equal(signIn.status, 303, signIn.body)
    const cookie = String(signIn.headers['set-cookie']).split(';')[0] as string
    const statuses: number[] = []
    for (let i = 0; i < 12; i++) {
      statuses.push((await request(`${origin}/admin/tenants`, { headers: { cookie } })).status)
    }
    assert.deepEqual(new Set(statuses), new Set([200]))
  })

  it('every worker answers forward-auth decisions on the shared decision port', async () => {
    const { token } = await issuePat(data.dir, [])
    const start = served.log.length
    const statuses: number[] = []
    for (let i = 0; i < 8; i++) {
      const decided = await request(`http://127.0.0.1:${decisionPort}/api/v1/reports/q3`, {
        headers: { authorization: `Bearer ${token}` },
      })
      statuses.push(decided.status)
    }
    assert.deepEqual(new Set(statuses), new Set([200]))
    for (let i = 0; i < 100 && requestLines(served, start).length < 8; i++) await sleep(20)
    assert.equal(new Set(requestLines(served, start).map((line) => line.pid)).size, 2)
  })

  it('SIGHUP to the primary reloads the gateway policy in every worker', async () => {
    const { token } = await issuePat(data.dir, [])
    const before = await batch(served, '/api/v1/reports/q3', token, 8)
    assert.deepEqual(new Set(before.statuses), new Set([200]))
    writeFileSync(
      policyFile,
      "rules:\n  - methods: '*'\n    path: /api/v1/reports/*\n    deny: true\n",
    )
    served.child.kill('SIGHUP')
    // Each worker logs one reload per listener (API and decision): wait for two workers.
    const reloadedPids = () => new Set(served.log.filter(isReload).map((line) => line.pid))
    for (let i = 0; i < 200 && reloadedPids().size < 2; i++) await sleep(50)
    assert.equal(served.child.exitCode, null, `the primary still runs: ${served.stderr()}`)
    assert.equal(reloadedPids().size, 2)
    const after = await batch(served, '/api/v1/reports/q3', token, 8)
    assert.deepEqual(new Set(after.statuses), new Set([404]))
    assert.equal(after.pids.size, 2)
  })

  it('SIGTERM drains every worker and the primary exits 0', async () => {
    const pids = [...workerPids(served)]
    served.child.kill('SIGTERM')
    assert.equal(await served.exited, 0)
    for (const pid of pids) {
      assert.throws(() => process.kill(pid, 0), { code: 'ESRCH' }, `worker ${pid} is gone`)
    }
  })
})

describe('worker pool supervision', () => {
  it('a crash loop stops the pool with a clear reason', { timeout: 60_000 }, async () => {
    const config = loadConfig({
      env: {},
      overrides: { server: { plainHttp: true, port: 0 }, dataDir: '/nonexistent' },
    })
    const notes: string[] = []
    const pool = await startWorkerPool({
      config,
      count: 1,
      entry: fileURLToPath(new URL('../fixtures/crashing-worker.ts', import.meta.url)),
      note: (line) => notes.push(line),
      restart: { initialDelayMs: 10, maxDelayMs: 50, maxCrashes: 2, windowMs: 60_000 },
    })
    const reason = await pool.failed
    assert.match(
      reason,
      /workers exited 3 times within 60 s \(last: pid \d+, exit code 3\); stopping/,
    )
    assert.equal(notes.length, 2)
    await pool.close()
  })

  it('a worker that cannot start fails the pool start with its error', {
    timeout: 60_000,
  }, async () => {
    const config = loadConfig({ env: {}, overrides: { server: { plainHttp: true, port: 0 } } })
    await assert.rejects(
      startWorkerPool({
        config,
        count: 2,
        entry: fileURLToPath(new URL('../fixtures/failing-worker.ts', import.meta.url)),
        note: () => {},
      }),
      /no store for this test/,
    )
  })

  it('workers get the production Node flags and heap-growth flag, each unless it was chosen', () => {
    const started = (execArgv: string[], nodeOptions?: string) =>
      servedWorkerFlags({ execArgv, nodeOptions })
    assert.deepEqual(started(['--enable-source-maps']), [
      '--enable-source-maps',
      '--max-semi-space-size=8',
      '--heap-growing-percent=50',
    ])
    assert.deepEqual(started(['--max_semi_space_size=4', '--heap-growing-percent=30']), [
      '--max_semi_space_size=4',
      '--heap-growing-percent=30',
    ])
    assert.deepEqual(started(['--max-semi-space-size', '16'], '--heap-growing-percent=80'), [
      '--max-semi-space-size',
      '16',
    ])
  })

  it('auto is one worker per CPU; rate limits are split per worker only without Redis', () => {
    assert.equal(workerCount('auto', 16), 16)
    assert.equal(workerCount(3, 16), 3)
    const config = loadConfig({
      env: {},
      overrides: { server: { plainHttp: true }, rateLimit: { perToken: { max: 101 } } },
    })
    const split = configForWorkers(config, 4)
    assert.equal(split.rateLimit.perToken.max, 26)
    assert.equal(split.rateLimit.failedAuth.max, Math.ceil(config.rateLimit.failedAuth.max / 4))
    assert.equal(configForWorkers(config, 1), config)
    const withRedis = loadConfig({
      env: {},
      overrides: { server: { plainHttp: true }, redisUrl: 'redis://127.0.0.1:6379' },
    })
    assert.equal(configForWorkers(withRedis, 4), withRedis)
  })

  it('refuses two listeners on port 0 of one address: node:cluster would give both one socket', () => {
    const config = (overrides: object) =>
      loadConfig({ env: {}, overrides: { server: { plainHttp: true, port: 0 }, ...overrides } })
    const both = config({ admin: { enabled: true, host: '127.0.0.1', port: 0 } })
    assert.throws(
      () => configForWorkers(both, 2),
      (error: Error) =>
        error instanceof ConfigError &&
        /server\.port and admin\.port are both 0 on 127\.0\.0\.1/.test(error.message),
    )
    assert.equal(configForWorkers(both, 1), both, 'one process: two port-0 listeners are fine')
    const apart = config({ admin: { enabled: true, host: '127.0.0.1', port: 0 } })
    assert.doesNotThrow(() =>
      configForWorkers({ ...apart, server: { ...apart.server, host: '127.0.0.2' } }, 2),
    )
    assert.doesNotThrow(() =>
      configForWorkers(config({ admin: { enabled: false, host: '127.0.0.1', port: 0 } }), 2),
    )
  })

  it('serve refuses it before forking, naming both settings', async () => {
    const data = tempDataDir()
    try {
      const result = await cli(['serve', '--http', '--listen', '127.0.0.1:0'], {
        dataDir: data.dir,
        env: {
          TOKENGATE_WORKERS: '2',
          TOKENGATE_ADMIN_ENABLED: 'true',
          TOKENGATE_ADMIN_HOST: '127.0.0.1',
          TOKENGATE_ADMIN_PORT: '0',
        },
      })
      assert.notEqual(result.code, 0)
      assert.match(result.stderr, /server\.port and admin\.port are both 0 on 127\.0\.0\.1/)
    } finally {
      data.cleanup()
    }
  })
})
