/**
 * Gateway overhead: the same small upstream called directly, through a bare undici proxy
 * (`node:http` + an undici pool: the floor of a Node.js proxy hop), through the same relay
 * behind a bare Fastify route (what Fastify adds), through a bare Fastify +
 * @fastify/reply-from proxy, and through tokengate in gateway mode (PAT authentication, policy
 * check, identity headers, proxy) over plain HTTP and over HTTPS. Prints requests/s, p50 and
 * p99 latency, the ratio to direct, and the CPU time the server under test spent per request.
 *
 * Fair on a small machine: the server under test (the upstream itself for "direct", the proxy
 * otherwise) runs alone on CPU 0; the load generator (wrk, or autocannon when wrk is absent)
 * and, for proxied rows, the upstream share CPU 1 (`taskset`, when present with 2+ CPUs).
 * So no row pays for the upstream or the load generator on the core it is measured on.
 * `cpu µs/req` (from /proc, Linux) is what one request costs the server under test; it is
 * less sensitive to a busy neighbour than req/s, though it rises too when another process
 * shares the core. Each target is run `--runs` times, interleaved; the best run is kept
 * (noise only ever makes a run slower). On a shared machine, compare rows of one run only.
 *
 * Run: `./node_modules/.bin/node bench/gateway.bench.ts`
 * (options: `--duration 5 --connections 32 --runs 3`).
 */
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { readCli } from './cli.ts'
import { cpuMicros, type LoadResult, loadTool, runLoad } from './load.ts'
import { CAN_PIN, listenJsonUpstream, report, startReporting } from './processes.ts'

const { values } = readCli({
  script: 'bench/gateway.bench.ts',
  options: {
    role: { type: 'string' },
    upstream: { type: 'string' },
    https: { type: 'boolean' },
    duration: { type: 'number', value: 'S', default: 5 },
    connections: { type: 'number', integer: true, default: 32 },
    runs: { type: 'number', integer: true, default: 3 },
  },
  // This script's own child processes: left out of the usage.
  internal: ['role', 'upstream', 'https'],
})

/** Child role: the upstream, answering every request with a small JSON body. */
async function runUpstream(): Promise<void> {
  report({ url: `http://127.0.0.1:${await listenJsonUpstream()}` })
}

/**
 * Child role: a bare Fastify + @fastify/reply-from proxy with the same pool settings and no
 * authentication: the floor of what the proxy library alone costs on this machine.
 */
async function runBareProxy(upstream: string): Promise<void> {
  const { default: Fastify } = await import('fastify')
  const { default: replyFrom } = await import('@fastify/reply-from')
  const app = Fastify()
  await app.register(replyFrom, {
    base: upstream,
    disableRequestLogging: true,
    retryMethods: [],
    undici: { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 },
  })
  app.all('/*', (request, reply) => reply.from(request.url))
  report({ url: await app.listen({ host: '127.0.0.1', port: 0 }) })
}

/** Child role: the bare undici proxy, alone or behind Fastify (bench/servers/undici-proxy.ts). */
async function runBareUndici(upstream: string, fastify: boolean): Promise<void> {
  const { startFastifyUndiciProxy, startUndiciProxy } = await import('./servers/undici-proxy.ts')
  report({ url: await (fastify ? startFastifyUndiciProxy : startUndiciProxy)(upstream, 0) })
}

/** Child role: tokengate in gateway mode with one tenant and one PAT. */
async function runGateway(upstream: string, https: boolean): Promise<void> {
  const { loadConfig } = await import('../src/config/load.ts')
  const { issuePat } = await import('../src/core/pat.ts')
  const { startTokengate } = await import('../src/main.ts')
  const { openStore } = await import('../src/stores/open-store.ts')
  const { ensureDevCertificate } = await import('../src/server/tls.ts')
  const { ConfigSchema } = await import('../src/config/schema.ts')
  const dataDir = mkdtempSync(join(tmpdir(), 'tokengate-bench-'))
  process.on('exit', () => rmSync(dataDir, { recursive: true, force: true }))
  const store = await openStore({ dataDir })
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: 'acme', name: 'Acme' }, now)
  const { token, record } = issuePat({
    tenantId: 'acme',
    subject: 'bench',
    name: 'bench',
    permissions: ['projects:read'],
    expiresAt: now + 86_400_000,
    now,
  })
  await store.insertPat(record)
  await store.close()
  // HTTPS with the self-signed dev certificate (autocannon does not verify certificates).
  if (https) await ensureDevCertificate(dataDir)
  const tls = https
    ? {
        tlsCertFile: join(dataDir, 'tls', 'dev-cert.pem'),
        tlsKeyFile: join(dataDir, 'tls', 'dev-key.pem'),
      }
    : {}
  const config = loadConfig({
    env: {},
    overrides: {
      dataDir,
      dev: false,
      server: { host: '127.0.0.1', port: 0, plainHttp: !https, ...tls },
      log: { level: 'silent' },
      // One token drives the whole load: per-token limits would measure the limiter instead.
      ...('rateLimit' in ConfigSchema.properties ? { rateLimit: { enabled: false } } : {}),
      // The same token on every connection: the per-token and per-tenant in-flight caps (a
      // fairness defence) would answer 429 to the load itself.
      gateway: { upstream, maxInFlightPerToken: 1_000_000, maxInFlightPerTenant: 1_000_000 },
    },
  })
  const running = await startTokengate(config)
  process.once('SIGTERM', () => void running.close().then(() => process.exit(0)))
  report({ url: running.url, token })
}

interface Target {
  readonly name: string
  readonly url: string
  readonly headers: Record<string, string>
  /** The process whose CPU time is charged to each request: the server on CPU 0. */
  readonly pid: number | undefined
}

interface Row {
  readonly target: string
  readonly 'req/s': number
  readonly 'p50 ms': number
  readonly 'p99 ms': number
  readonly 'cpu µs/req': number | string
  readonly non2xx: number
}

const tool = loadTool()

async function measure(target: Target): Promise<Row> {
  const request = {
    url: target.url,
    path: '/api/v1/projects/p1',
    headers: target.headers,
    connections: values.connections,
  }
  // Warm-up: JIT, connection pools, the token cache.
  await runLoad(tool, { ...request, durationSec: 1 }, CAN_PIN ? 1 : undefined)
  const before = cpuMicros(target.pid)
  const result: LoadResult = await runLoad(
    tool,
    { ...request, durationSec: values.duration },
    CAN_PIN ? 1 : undefined,
  )
  const after = cpuMicros(target.pid)
  // A refusal costs less than a proxied request: a row with any is not a measurement of one.
  if (result.non2xx > 0) throw new Error(`${target.name}: ${result.non2xx} responses were not 2xx`)
  return {
    target: target.name,
    'req/s': Math.round(result.rps),
    'p50 ms': Math.round(result.p50Ms * 100) / 100,
    'p99 ms': Math.round(result.p99Ms * 100) / 100,
    'cpu µs/req':
      before === undefined || after === undefined || result.requests === 0
        ? '-'
        : Math.round((after - before) / result.requests),
    non2xx: result.non2xx,
  }
}

async function main(): Promise<void> {
  const children: ChildProcess[] = []
  const start = async (cpu: number, args: string[]) => {
    const started = await startReporting(cpu, [import.meta.filename, ...args])
    children.push(started.child)
    return started
  }
  try {
    // Two upstreams: one alone on CPU 0 for "direct", one beside the load generator on
    // CPU 1 for the proxied rows, so the proxy under test has CPU 0 to itself.
    const solo = await start(0, ['--role', 'upstream'])
    const upstream = await start(1, ['--role', 'upstream'])
    const upstreamUrl = upstream.info.url as string
    const undiciProxy = await start(0, ['--role', 'bare-undici', '--upstream', upstreamUrl])
    const fastifyUndici = await start(0, ['--role', 'fastify-undici', '--upstream', upstreamUrl])
    const bare = await start(0, ['--role', 'bare', '--upstream', upstreamUrl])
    const plain = await start(0, ['--role', 'gateway', '--upstream', upstreamUrl])
    const tls = await start(0, ['--role', 'gateway', '--https', '--upstream', upstreamUrl])
    const auth = (token: string | undefined) => ({ authorization: `Bearer ${token}` })
    const targets: Target[] = [
      { name: 'direct (http)', url: solo.info.url as string, headers: {}, pid: solo.child.pid },
      {
        name: 'bare undici proxy (http)',
        url: undiciProxy.info.url as string,
        headers: {},
        pid: undiciProxy.child.pid,
      },
      {
        name: 'Fastify + undici proxy (http)',
        url: fastifyUndici.info.url as string,
        headers: {},
        pid: fastifyUndici.child.pid,
      },
      {
        name: 'bare reply-from (http)',
        url: bare.info.url as string,
        headers: {},
        pid: bare.child.pid,
      },
      {
        name: 'gateway (http)',
        url: plain.info.url as string,
        headers: auth(plain.info.token),
        pid: plain.child.pid,
      },
      {
        name: 'gateway (https)',
        url: tls.info.url as string,
        headers: auth(tls.info.token),
        pid: tls.child.pid,
      },
    ]

    const best = new Map<string, Row>()
    for (let run = 0; run < values.runs; run++) {
      for (const target of targets) {
        const row = await measure(target)
        const kept = best.get(target.name)
        if (!kept || row['req/s'] > kept['req/s']) best.set(target.name, row)
      }
    }
    const rows = targets.map((target) => best.get(target.name) as Row)
    const direct = rows[0] as Row
    console.log(
      `Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${tool}, ` +
        `${values.duration} s × ${values.connections} connections, best of ${values.runs}, ` +
        `pinning: ${CAN_PIN ? 'server under test CPU 0; load + upstream CPU 1' : 'none'}, ` +
        new Date().toISOString(),
    )
    console.table(
      rows.map((row) => ({
        ...row,
        'ratio req/s': Math.round((row['req/s'] / direct['req/s']) * 100) / 100,
      })),
    )
  } finally {
    for (const child of children) child.kill('SIGTERM')
  }
}

if (values.role === 'upstream') await runUpstream()
else if (values.role === 'bare') await runBareProxy(values.upstream as string)
else if (values.role === 'bare-undici') await runBareUndici(values.upstream as string, false)
else if (values.role === 'fastify-undici') await runBareUndici(values.upstream as string, true)
else if (values.role === 'gateway') await runGateway(values.upstream as string, values.https)
else await main()
