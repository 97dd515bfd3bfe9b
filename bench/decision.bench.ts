/**
 * Forward auth against tokengate's own proxying (issues #14, #23): the same small upstream
 * behind
 * - nginx alone (`proxy_pass`, no auth): the floor;
 * - nginx + `auth_request` → tokengate's decision listener (examples/forward-auth/nginx.conf,
 *   as documented) → the upstream;
 * - the same with the example's decision cache turned on (its `#cache ` lines): a repeated
 *   credential is decided about once a second (the expiry tokengate states, tied to its
 *   change-log reads), so this is the cache's best case, one token on every connection;
 * - tokengate's gateway → the upstream;
 * for a PAT and a repeated JWT (with X-Tenant-Id). Prints 2xx req/s (only 2xx answers are
 * counted; a row with any other is flagged), latency, the ratio to nginx alone, and the CPU
 * time each process (nginx, tokengate, upstream) spent per request, from /proc/<pid>/stat
 * (utime + stime).
 *
 * Bounded for a shared machine: 127.0.0.1 only, wrk with one thread (pinned to the last CPU
 * when `taskset` exists), `--duration` seconds per case (default 3) after a 1 s warm-up,
 * `--runs` interleaved rounds (default 2: every case once per round, best round kept).
 * Compare rows of one run only.
 *
 * Run: `./node_modules/.bin/node bench/decision.bench.ts` (options: `--duration 3 --runs 2
 * --connections 16`). Needs nginx (Debian: /usr/sbin/nginx) and wrk or autocannon.
 */
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { readCli } from './cli.ts'
import { commandExists, cpuMicros, loadTool, runLoad } from './load.ts'
import { CAN_PIN, listenJsonUpstream, report, startReporting } from './processes.ts'
import { nginxBinary, type RunningNginx, startNginx } from './servers/nginx.ts'

const { values } = readCli({
  script: 'bench/decision.bench.ts',
  options: {
    role: { type: 'string' },
    upstream: { type: 'string' },
    duration: { type: 'number', value: 'S', default: 3 },
    runs: { type: 'number', integer: true, default: 2 },
    connections: { type: 'number', integer: true, default: 16 },
  },
  // This script's own child processes: left out of the usage.
  internal: ['role', 'upstream'],
})

const PATH = '/api/v1/projects/p1'
const TENANT = 'acme'

/** Child role: the upstream, a small JSON answer to everything. */
async function runUpstream(): Promise<void> {
  report({ port: await listenJsonUpstream() })
}

/** Child role: tokengate with the gateway and the decision listener, one PAT, one issuer. */
async function runTokengate(upstream: string): Promise<void> {
  const { loadConfig } = await import('../src/config/load.ts')
  const { issuePat } = await import('../src/core/pat.ts')
  const { startTokengate } = await import('../src/main.ts')
  const { openStore } = await import('../src/stores/open-store.ts')
  const { createTestIssuer } = await import('../test/helpers/jwt.ts')
  const { UNLIMITED_IN_FLIGHT, UNLIMITED_RATE_LIMITS } = await import('./fixtures.ts')
  const dataDir = mkdtempSync(join(tmpdir(), 'tokengate-bench-decision-'))
  process.on('exit', () => rmSync(dataDir, { recursive: true, force: true }))
  const store = await openStore({ dataDir })
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: TENANT, name: 'Acme' }, now)
  const issuer = createTestIssuer()
  await store.putIssuer(issuer.config, now)
  const { token, record } = issuePat({
    tenantId: TENANT,
    subject: 'bench',
    name: 'bench',
    permissions: ['projects:read'],
    expiresAt: now + 86_400_000,
    now,
  })
  await store.insertPat(record)
  await store.close()
  const jwt = await issuer.sign(
    { tenant_id: TENANT, permissions: ['projects:read'] },
    { expiresInSec: 3600 },
  )
  const config = loadConfig({
    env: {},
    overrides: {
      dataDir,
      server: { host: '127.0.0.1', port: 0, plainHttp: true },
      log: { level: 'warn' },
      rateLimit: UNLIMITED_RATE_LIMITS,
      gateway: { upstream, ...UNLIMITED_IN_FLIGHT },
      decision: { host: '127.0.0.1', port: 0, proxy: 'nginx' },
    },
  })
  const running = await startTokengate(config)
  process.once('SIGTERM', () => void running.close().then(() => process.exit(0)))
  report({ gateway: running.url, decision: running.decisionUrl, pat: token, jwt })
}

interface Case {
  readonly name: string
  readonly url: string
  readonly headers: Record<string, string>
  /** The nginx process that serves it (for its CPU column). */
  readonly nginx: 'plain' | 'cached'
}

interface Measured {
  readonly rps: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly non2xx: number
  /** CPU µs per request of each process. */
  readonly cpu: Record<'nginx' | 'tokengate' | 'upstream', number | undefined>
}

async function main(): Promise<void> {
  if (!commandExists('nginx') && !nginxBinary()) {
    console.log('nginx not installed: nothing to measure (apt-get install nginx)')
    return
  }
  const children: ChildProcess[] = []
  const tool = loadTool()
  const wrkCpu = CAN_PIN ? cpus().length - 1 : undefined
  let nginx: RunningNginx | undefined
  let cached: RunningNginx | undefined
  try {
    const upstream = await startReporting(undefined, [import.meta.filename, '--role', 'upstream'])
    children.push(upstream.child)
    const upstreamUrl = `http://127.0.0.1:${upstream.info.port}`
    const tokengate = await startReporting(undefined, [
      import.meta.filename,
      '--role',
      'tokengate',
      '--upstream',
      upstreamUrl,
    ])
    children.push(tokengate.child)
    const { gateway, decision, pat, jwt } = tokengate.info as Record<string, string>
    const decisionPort = Number(new URL(decision as string).port)
    nginx = await startNginx(Number(upstream.info.port), decisionPort)
    children.push(nginx.child)
    cached = await startNginx(Number(upstream.info.port), decisionPort, { cache: true })
    children.push(cached.child)

    const patHeaders = { authorization: `Bearer ${pat}` }
    const jwtHeaders = { authorization: `Bearer ${jwt}`, 'x-tenant-id': TENANT }
    const cases: Case[] = [
      { name: 'nginx → upstream (no auth)', url: nginx.plain, headers: patHeaders, nginx: 'plain' },
      {
        name: 'nginx + auth_request → decision, PAT',
        url: nginx.guarded,
        headers: patHeaders,
        nginx: 'plain',
      },
      {
        name: 'nginx + auth_request + cache → decision, PAT',
        url: cached.guarded,
        headers: patHeaders,
        nginx: 'cached',
      },
      {
        name: 'nginx + auth_request → decision, JWT',
        url: nginx.guarded,
        headers: jwtHeaders,
        nginx: 'plain',
      },
      {
        name: 'nginx + auth_request + cache → decision, JWT',
        url: cached.guarded,
        headers: jwtHeaders,
        nginx: 'cached',
      },
      {
        name: 'tokengate gateway, PAT',
        url: gateway as string,
        headers: patHeaders,
        nginx: 'plain',
      },
      {
        name: 'tokengate gateway, JWT',
        url: gateway as string,
        headers: jwtHeaders,
        nginx: 'plain',
      },
    ]
    const nginxPids = { plain: nginx.child.pid, cached: cached.child.pid }
    const best = new Map<string, Measured>()
    const runs = values.runs
    for (let round = 0; round < runs; round++) {
      for (const benchCase of cases) {
        const request = {
          url: benchCase.url,
          path: PATH,
          headers: benchCase.headers,
          connections: values.connections,
        }
        if (round === 0) await runLoad(tool, { ...request, durationSec: 1 }, wrkCpu)
        const pids = {
          nginx: nginxPids[benchCase.nginx],
          tokengate: tokengate.child.pid,
          upstream: upstream.child.pid,
        }
        const before = Object.fromEntries(
          Object.entries(pids).map(([name, pid]) => [name, cpuMicros(pid)]),
        )
        const result = await runLoad(tool, { ...request, durationSec: values.duration }, wrkCpu)
        const cpu = Object.fromEntries(
          Object.entries(pids).map(([name, pid]) => {
            const start = before[name]
            const end = cpuMicros(pid)
            return [
              name,
              start === undefined || end === undefined || result.requests === 0
                ? undefined
                : (end - start) / result.requests,
            ]
          }),
        ) as Measured['cpu']
        // A refusal costs less than an allowed request: only 2xx answers are counted.
        const ok = result.requests - result.non2xx
        const measured = {
          ...result,
          rps: result.requests === 0 ? 0 : (result.rps * ok) / result.requests,
          cpu,
        }
        const previous = best.get(benchCase.name)
        if (!previous || measured.rps > previous.rps) best.set(benchCase.name, measured)
      }
    }

    const floor = best.get(cases[0]?.name as string) as Measured
    const gatewayPat = best.get('tokengate gateway, PAT') as Measured
    const us = (value: number | undefined) =>
      value === undefined ? '-' : String(Math.round(value))
    console.log(
      `\n${tool}, ${values.connections} connections, ${values.duration} s × ${runs} interleaved rounds (best kept), ${new Date().toISOString().slice(0, 10)}\n`,
    )
    console.log(
      '| path | 2xx req/s | p50 | p99 | vs nginx alone | nginx µs/req | tokengate µs/req | upstream µs/req | non-2xx |',
    )
    console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    for (const benchCase of cases) {
      const m = best.get(benchCase.name) as Measured
      console.log(
        `| ${benchCase.name} | ${Math.round(m.rps).toLocaleString('en')} | ${m.p50Ms.toFixed(2)} ms | ${m.p99Ms.toFixed(2)} ms | ${(m.rps / floor.rps).toFixed(2)} | ${us(m.cpu.nginx)} | ${us(m.cpu.tokengate)} | ${us(m.cpu.upstream)} | ${m.non2xx} |`,
      )
    }
    const decisionPat = best.get(cases[1]?.name as string) as Measured
    if (decisionPat.cpu.tokengate !== undefined && gatewayPat.cpu.tokengate !== undefined) {
      console.log(
        `\ntokengate CPU per request, decision / gateway (PAT): ${(decisionPat.cpu.tokengate / gatewayPat.cpu.tokengate).toFixed(2)}`,
      )
    }
  } finally {
    for (const child of children) child.kill('SIGTERM')
    nginx?.cleanup()
    cached?.cleanup()
  }
}

if (values.role === 'upstream') await runUpstream()
else if (values.role === 'tokengate') await runTokengate(values.upstream as string)
else await main()
