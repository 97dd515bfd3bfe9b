/**
 * The load benchmark: tokengate against the no-auth ceiling and the peers, in one run.
 *
 * Every server runs in its own process pinned to CPU 0 (`taskset`, when present); the load
 * generator (`wrk`, or autocannon when wrk is absent) runs pinned to CPU 1. Each case is run
 * on every server that can answer it, repeated, servers interleaved within a repeat so that
 * drift on a shared machine hits all of them alike; the table shows medians and ratios from
 * this run only. See bench/README.md.
 *
 * The hops case (bench/hop-rows.ts) prints each target beside its floor from the same run: the
 * same hop with nothing deciding (`nginx + … floor` rows and `undici proxy + identity headers`);
 * `--servers` picks them as any other row. What a chosen row needs (the upstream, the server an
 * nginx row asks) starts with it even when `--servers` does not name it, and runs no case then.
 *
 * Usage: npm run bench -- [--quick] [--duration 5] [--repeats 3] [--connections 32]
 *        [--cases REGEX] [--servers REGEX]  (a focused run: printed, not written)
 *        [--baseline DIR]  (an earlier commit's tokengate rows beside this tree's)
 *        [--help]  (an unknown flag stops with this usage: bench/cli.ts)
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus } from 'node:os'
import { join } from 'node:path'
import { readCli } from './cli.ts'
import { BENCH_TENANT, type BenchAlgorithm, type Fixtures, loadFixtures } from './fixtures.ts'
import {
  asksSocket,
  decisionResponders,
  decisionSocketPath,
  hopRatioLines,
  isNginxRow,
  isUndiciRelay,
  nginxRows,
  removeDecisionSockets,
  serversToStart,
  startNginxRow,
} from './hop-rows.ts'
import { median } from './latency-stats.ts'
import {
  commandExists,
  cpuMicros,
  type LoadRequest,
  type LoadResult,
  loadTool,
  PRODUCTION_NODE_FLAGS,
  runLoad,
} from './load.ts'
import { NAIVE_ANSWER, patFloorLines } from './pat-floor.ts'

// Strict: a mistyped flag must stop here, not start a full run that holds both cores.
const { values } = readCli({
  script: 'bench/run.ts',
  command: 'npm run bench --',
  options: {
    quick: { type: 'boolean' },
    duration: { type: 'number', value: 'SEC' },
    repeats: { type: 'number', integer: true },
    connections: { type: 'number', integer: true, default: 32 },
    cases: { type: 'regex' },
    servers: { type: 'regex' },
    baseline: { type: 'string', value: 'DIR' },
  },
})
const args = process.argv.slice(2)
const quick = values.quick
const DURATION_SEC = values.duration ?? (quick ? 1 : 5)
const REPEATS = values.repeats ?? (quick ? 1 : 3)
const CONNECTIONS = values.connections
const started = Date.now()
// A focused run (one change's before/after): only these cases and servers, no crypto ceiling
// or micro-benchmark, nothing written to bench/results.
const CASES = values.cases
const SERVERS = values.servers
// `--baseline DIR`: a copy of an earlier commit (git archive | tar -x, node_modules linked),
// whose tokengate and library servers run as extra rows interleaved with this tree's: an
// A/B of a change in one run.
const BASELINE = values.baseline
const focused = CASES !== undefined || SERVERS !== undefined
const QUICK_PEER_CASES = /single|RS256 distinct|garbage|PAT/

/** Issue #6's HAProxy `jwt_verify` figures, as shares of no-auth Fastify on the same machine. */
const HAPROXY_SHARE: Partial<Record<BenchAlgorithm, number>> = {
  RS256: 0.39,
  ES256: 0.16,
  HS256: 0.94,
}

const node = process.execPath
const haveTaskset = commandExists('taskset') && cpus().length >= 2
const pin = (cpus: number | string, command: string, argv: string[]): [string, string[]] =>
  haveTaskset ? ['taskset', ['-c', String(cpus), command, ...argv]] : [command, argv]

// ---------------------------------------------------------------------------------------
// Servers

interface Server {
  readonly id: string
  /**
   * Peers with a verifier count for "best peer"; ceilings and tokengate do not. Hops are the
   * proxies of the hop case (bench/hop-rows.ts), compared with each other only. A responder
   * answers the auth subrequests of a floor row and runs no case itself.
   */
  readonly role: 'tokengate' | 'ceiling' | 'peer' | 'upstream' | 'hop' | 'responder'
  readonly argv: string[]
  /** Where it listens instead of its port (a responder on a Unix socket: `unix:<path>`). */
  readonly listen?: string
  /** taskset CPU list; '0' unless the row is about using more cores. */
  readonly cpus: string
  /** tokengate rows that run only some cases (all but no-auth and gateway otherwise). */
  readonly only?: RegExp
  port: number
  child?: ChildProcess
  /** Run when the server is stopped (nginx: its temporary prefix). */
  cleanup?: () => void
  /** tokengate with `--decision`: its decision listener's port. */
  decisionPort?: number
}

let nextPort = 19_100 + Math.floor(Math.random() * 500)
const peerArgv = (kind: string, alg: string, fixtures: Fixtures) => [
  'bench/servers/peer.ts',
  kind,
  alg,
  fixtures.dir,
]

function defineServers(fixtures: Fixtures): Server[] {
  const servers: Server[] = []
  const add = (
    id: string,
    role: Server['role'],
    argv: string[],
    more: { cpus?: string; only?: RegExp; listen?: string } = {},
  ) => servers.push({ id, role, argv, cpus: more.cpus ?? '0', port: nextPort++, ...more })
  add('upstream', 'upstream', peerArgv('upstream', 'RS256', fixtures))
  // The Node flag production starts with (bin/tokengate.js, `npm start`): production defaults.
  const tokengate = [...PRODUCTION_NODE_FLAGS, 'bench/servers/tokengate.ts', fixtures.dir]
  add('tokengate', 'tokengate', tokengate)
  // With the decision listener (nginx `auth_request` asks it: the nginx rows below).
  add('tokengate-gateway', 'tokengate', [...tokengate, '--decision'])
  // Library mode: tokengatePlugin + the public createAuthenticator, lookups in memory.
  add('tokengate library', 'tokengate', ['bench/servers/library.ts', fixtures.dir])
  // Issue #36: the whole product embedded (`createTokengate` over SQLite, limits counted).
  add('tokengate createTokengate', 'tokengate', [
    'bench/servers/library.ts',
    '--create-tokengate',
    fixtures.dir,
  ])
  if (BASELINE) {
    add('tokengate@baseline', 'tokengate', [
      ...PRODUCTION_NODE_FLAGS,
      join(BASELINE, 'bench/servers/tokengate.ts'),
      fixtures.dir,
    ])
    add('tokengate library@baseline', 'tokengate', [
      join(BASELINE, 'bench/servers/library.ts'),
      fixtures.dir,
    ])
    add('tokengate createTokengate@baseline', 'tokengate', [
      join(BASELINE, 'bench/servers/library.ts'),
      '--create-tokengate',
      fixtures.dir,
    ])
  }
  // Every core: wrk stays on CPU 1, so two workers share it with the load generator and the
  // one-worker row on the same two CPUs is the fair comparison.
  const cores = /^PAT single|^JWT RS256 single|^401 garbage/
  add('tokengate workers=1 (CPUs 0-1)', 'tokengate', tokengate, { cpus: '0,1', only: cores })
  add('tokengate workers=2 (CPUs 0-1)', 'tokengate', [...tokengate, '--workers=2'], {
    cpus: '0,1',
    only: cores,
  })
  add('fastify-noauth', 'ceiling', peerArgv('fastify-noauth', 'RS256', fixtures))
  add('node-http', 'ceiling', peerArgv('node-http', 'RS256', fixtures))
  add('fastify-naive-pat', 'peer', peerArgv('fastify-naive', 'RS256', fixtures))
  // Not a peer: the naive check answering createTokengate's bytes, the floor of its PAT target.
  add(NAIVE_ANSWER, 'ceiling', peerArgv('fastify-naive-answer', 'RS256', fixtures))
  for (const alg of ['RS256', 'ES256', 'EdDSA', 'HS256']) {
    add(`@fastify/jwt ${alg}`, 'peer', peerArgv('fastify-jwt', alg, fixtures))
    // jsonwebtoken (under express-jwt) has no EdDSA.
    if (alg !== 'EdDSA') add(`express-jwt ${alg}`, 'peer', peerArgv('express-jwt', alg, fixtures))
    add(`hono/jwt ${alg}`, 'peer', peerArgv('hono-jwt', alg, fixtures))
  }
  // The hop case: the smallest Node proxy, and nginx alone, asking tokengate, with its cache.
  add('undici proxy', 'hop', ['bench/servers/undici-proxy.ts'])
  // The same relay sending the gateway's promised headers, fixed: the gateway minus its gate.
  add('undici proxy + identity headers', 'hop', ['bench/servers/undici-proxy.ts', '--identity'])
  const nginx = nginxRows()
  // The `(unix)` nginx rows ask this one on a Unix socket (decision.socket); it runs no case.
  if (nginx.some(asksSocket)) {
    add(
      'tokengate-decision-socket',
      'tokengate',
      [...tokengate, `--decision-socket=${decisionSocketPath()}`],
      {
        only: /(?!)/,
      },
    )
  }
  // The floor rows' do-nothing decision listeners (bench/servers/decision-floor.ts).
  for (const { id, argv, listen } of decisionResponders(nginx)) {
    add(id, 'responder', argv, listen === undefined ? {} : { listen })
  }
  for (const id of nginx) add(id, 'hop', [])
  return servers
}

async function startServer(server: Server, servers: readonly Server[]): Promise<void> {
  const upstream = servers.find((s) => s.id === 'upstream') as Server
  if (isNginxRow(server.id)) {
    return startNginxRow(server, servers, upstream.port, haveTaskset ? 0 : undefined)
  }
  const argv = [...server.argv, server.listen ?? String(server.port)]
  if (server.id === 'tokengate-gateway') argv.push(`http://127.0.0.1:${upstream.port}`)
  // undici-proxy.ts takes the upstream first.
  if (isUndiciRelay(server.id)) argv.splice(1, 0, `http://127.0.0.1:${upstream.port}`)
  const [command, commandArgs] = pin(server.cpus, node, argv)
  const child = spawn(command, commandArgs, { stdio: ['ignore', 'pipe', 'pipe'] })
  server.child = child
  let errors = ''
  child.stderr?.on('data', (chunk) => {
    errors += chunk
  })
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${server.id} did not start: ${errors}`)),
      30_000,
    )
    let output = ''
    child.stdout?.on('data', (chunk) => {
      output += chunk
      if (output.includes('READY')) {
        const decision = /^DECISION (\d+)/m.exec(output)?.[1]
        if (decision) server.decisionPort = Number(decision)
        clearTimeout(timer)
        resolve()
      }
    })
    child.on('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`${server.id} exited with ${code}: ${errors}`))
    })
  })
  child.removeAllListeners('exit')
}

function stopServers(servers: readonly Server[]): void {
  for (const server of servers) {
    server.child?.kill('SIGTERM')
    server.cleanup?.()
  }
  removeDecisionSockets()
}

// ---------------------------------------------------------------------------------------
// Cases

interface Case {
  readonly id: string
  readonly request: Omit<LoadRequest, 'url' | 'durationSec' | 'connections'>
  readonly expect: number
  /** Servers that can answer this case (tokengate always). */
  readonly servers: (server: Server) => boolean
  /** tokengate's target, as a rate, given this run's measurements. */
  readonly target?: (m: Measured) => { rate: number; label: string } | undefined
  /** Which ceiling measurement this case is compared with. */
  readonly ceiling: 'single' | 'pool'
}

interface Measured {
  ceiling: number
  crypto: Record<string, number>
}

const JWT_PEERS = (alg: string) => (s: Server) =>
  s.id === `@fastify/jwt ${alg}` || s.id === `express-jwt ${alg}` || s.id === `hono/jwt ${alg}`
const ONLY =
  (...ids: string[]) =>
  (s: Server) =>
    ids.includes(s.id)

function defineCases(f: Fixtures): Case[] {
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
  const jwtHeaders = (token: string) => ({ ...bearer(token), 'x-tenant-id': BENCH_TENANT })
  const cases: Case[] = [
    {
      id: 'no-auth ceiling',
      request: { path: '/api/v1/me', headers: jwtHeaders(f.algs.RS256.single) },
      expect: 200,
      servers: ONLY('fastify-noauth', 'node-http'),
      ceiling: 'single',
    },
    {
      id: 'no-auth ceiling (pool)',
      request: {
        path: '/api/v1/me',
        headers: {},
        pool: { file: f.algs.RS256.poolFile, tenant: BENCH_TENANT },
      },
      expect: 200,
      servers: ONLY('fastify-noauth'),
      ceiling: 'pool',
    },
    {
      id: 'PAT single',
      request: { path: '/api/v1/me', headers: bearer(f.patSingle) },
      expect: 200,
      servers: ONLY('tokengate', 'fastify-naive-pat', NAIVE_ANSWER),
      target: (m) => ({ rate: 0.85 * m.ceiling, label: '0.85 no-auth' }),
      ceiling: 'single',
    },
    {
      id: 'PAT distinct (10k)',
      request: { path: '/api/v1/me', headers: {}, pool: { file: f.patPoolFile } },
      expect: 200,
      servers: ONLY('tokengate', 'fastify-naive-pat'),
      target: (m) => ({ rate: 0.85 * m.ceiling, label: '0.85 no-auth' }),
      ceiling: 'pool',
    },
  ]
  for (const alg of ['RS256', 'ES256', 'EdDSA', 'HS256'] as const) {
    cases.push({
      id: `JWT ${alg} single`,
      request: { path: '/api/v1/me', headers: jwtHeaders(f.algs[alg].single) },
      expect: 200,
      servers: (s) => s.id === 'tokengate' || JWT_PEERS(alg)(s),
      target: (m) => ({ rate: 0.85 * m.ceiling, label: '0.85 no-auth' }),
      ceiling: 'single',
    })
    cases.push({
      id: `JWT ${alg} distinct (10k)`,
      request: {
        path: '/api/v1/me',
        headers: {},
        pool: { file: f.algs[alg].poolFile, tenant: BENCH_TENANT },
      },
      expect: 200,
      servers: (s) => s.id === 'tokengate' || JWT_PEERS(alg)(s),
      target: (m) => {
        const verifies = m.crypto[alg]
        if (!verifies) return undefined
        const implied = 1 / (1 / m.ceiling + 1 / verifies)
        const haproxy = HAPROXY_SHARE[alg]
        const rate = Math.max(0.75 * implied, alg === 'HS256' ? 0 : (haproxy ?? 0) * m.ceiling)
        const label =
          alg === 'HS256' || haproxy === undefined
            ? '0.75 implied'
            : `max(0.75 implied, HAProxy ${haproxy})`
        return { rate, label }
      },
      ceiling: 'pool',
    })
  }
  cases.push(
    {
      id: 'JWT RS256 wrong X-Tenant-Id → 401',
      request: {
        path: '/api/v1/me',
        headers: { ...bearer(f.algs.RS256.single), 'x-tenant-id': 'other-tenant' },
      },
      expect: 401,
      servers: (s) => s.id === 'tokengate' || JWT_PEERS('RS256')(s),
      ceiling: 'single',
    },
    {
      id: '401 garbage',
      request: { path: '/api/v1/me', headers: bearer(f.patGarbage) },
      expect: 401,
      servers: (s) => s.id === 'tokengate' || s.id === 'fastify-naive-pat' || JWT_PEERS('RS256')(s),
      target: (m) => ({ rate: 0.8 * m.ceiling, label: '0.80 no-auth' }),
      ceiling: 'single',
    },
    {
      id: '401 bad checksum',
      request: { path: '/api/v1/me', headers: bearer(f.patBadChecksum) },
      expect: 401,
      servers: ONLY('tokengate', 'fastify-naive-pat'),
      target: (m) => ({ rate: 0.8 * m.ceiling, label: '0.80 no-auth' }),
      ceiling: 'single',
    },
    {
      id: '403 (JWT RS256 without the permission)',
      request: { path: '/api/v1/tokens', headers: jwtHeaders(f.forbiddenJwt) },
      expect: 403,
      servers: (s) => s.id === 'tokengate' || JWT_PEERS('RS256')(s),
      ceiling: 'single',
    },
    {
      // Issue #36: every proxy in front of the same upstream, all on CPU 0 (bench/hop-rows.ts).
      id: 'hops: PAT through each proxy',
      request: { path: '/api/v1/echo', headers: bearer(f.patSingle) },
      expect: 200,
      servers: (s) => s.role === 'hop' || s.id === 'tokengate-gateway',
      ceiling: 'single',
    },
    {
      id: 'gateway: proxied (PAT) vs direct upstream',
      request: { path: '/api/v1/echo', headers: bearer(f.patSingle) },
      expect: 200,
      servers: ONLY('tokengate-gateway', 'upstream'),
      ceiling: 'single',
    },
  )
  return cases
}

// ---------------------------------------------------------------------------------------
// Run

interface Row {
  case: string
  server: string
  role: Server['role']
  rps: number
  p50Ms: number
  p99Ms: number
  repeats: number[]
  /** Server CPU time (the process and its workers) per request, µs, median over repeats. */
  cpuUsPerRequest?: number
  /** tokengate rows: this row / the best peer, repeat by repeat (same round, adjacent runs). */
  roundsVsBestPeer?: number[]
  vsNoAuth?: number
  vsBestPeer?: number
  target?: string
  targetRps?: number
  met?: boolean
}

function cryptoCeiling(): Record<string, number> {
  const [command, argv] = pin(0, node, [
    'bench/crypto.bench.ts',
    '--json',
    ...(quick ? ['--quick'] : []),
  ])
  return JSON.parse(execFileSync(command, argv, { encoding: 'utf8' })) as Record<string, number>
}

function coreMicro(): unknown {
  const [command, argv] = pin(0, node, [
    'bench/authenticate.bench.ts',
    '--json',
    ...(quick ? ['--quick'] : []),
  ])
  try {
    return JSON.parse(execFileSync(command, argv, { encoding: 'utf8' }))
  } catch (error) {
    // The table is the point of the run: a failing micro-benchmark must not lose it.
    return { error: String(error) }
  }
}

async function check(url: string, request: Case['request'], expect: number, id: string) {
  const headers: Record<string, string> = { ...request.headers }
  if (request.pool) {
    const { readFileSync } = await import('node:fs')
    headers.authorization = `Bearer ${readFileSync(request.pool.file, 'utf8').split('\n', 1)[0]}`
    if (request.pool.tenant) headers['x-tenant-id'] = request.pool.tenant
  }
  const response = await fetch(url + request.path, { headers })
  await response.arrayBuffer()
  if (response.status !== expect) {
    throw new Error(`${id}: expected ${expect}, got ${response.status} from ${url}`)
  }
}

async function main() {
  const tool = loadTool()
  console.error(
    `load: ${tool}; pinning: ${haveTaskset ? 'taskset (server CPU 0, load CPU 1)' : 'none'}`,
  )
  const fixtures = loadFixtures()
  const defined = defineServers(fixtures)
  const chosen = defined.filter((s) => SERVERS?.test(s.id) ?? true)
  // What the chosen rows ask (the upstream, nginx's deciders) starts with them, named or not,
  // and runs no case unless chosen: `--servers '^nginx'` measures the nginx rows only.
  const servers = serversToStart(defined, chosen)
  const cases = defineCases(fixtures).filter((c) => CASES?.test(c.id) ?? true)
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      stopServers(servers)
      process.exit(130)
    })
  }
  try {
    for (const server of servers) await startServer(server, servers)
    if (!focused) console.error('crypto ceiling (one core, tight loop)…')
    const crypto = focused ? {} : cryptoCeiling()
    const results = new Map<string, LoadResult[]>()
    const cpu = new Map<string, number[]>()
    const key = (c: Case, s: Server) => `${c.id}\u0000${s.id}`
    // Warm every server's JIT on its first case before anything is measured (not in --quick,
    // a smoke run whose numbers are indicative only).
    for (const server of quick ? [] : chosen) {
      const first = cases.find(
        (c) => c.servers(server) || (c.id !== 'no-auth ceiling' && server.role === 'tokengate'),
      )
      if (first === undefined) continue
      await runLoad(
        tool,
        {
          ...first.request,
          url: `http://127.0.0.1:${server.port}`,
          durationSec: 1,
          connections: CONNECTIONS,
        },
        haveTaskset ? 1 : undefined,
      )
    }
    for (let repeat = 0; repeat < REPEATS; repeat++) {
      for (const c of cases) {
        for (const server of chosen) {
          const applies =
            c.servers(server) ||
            (server.role === 'tokengate' &&
              server.id !== 'tokengate-gateway' &&
              (server.only?.test(c.id) ?? true) &&
              !c.id.startsWith('no-auth') &&
              !c.id.startsWith('gateway') &&
              !c.id.startsWith('hops'))
          if (!applies) continue
          // --quick keeps CI around a minute: peers and library mode run the single-token
          // cases, RS256 distinct and 401 garbage only, the worker rows PAT single only;
          // tokengate runs every case.
          const narrowed = server.role === 'peer' || server.id === 'tokengate library'
          if (quick && narrowed && !QUICK_PEER_CASES.test(c.id)) continue
          if (quick && server.only && c.id !== 'PAT single') continue
          const url = `http://127.0.0.1:${server.port}`
          if (repeat === 0) await check(url, c.request, c.expect, `${c.id} on ${server.id}`)
          const cpuBefore = cpuMicros(server.child?.pid) ?? 0
          const result = await runLoad(
            tool,
            { ...c.request, url, durationSec: DURATION_SEC, connections: CONNECTIONS },
            haveTaskset ? 1 : undefined,
          )
          const cpuUs =
            result.requests > 0
              ? ((cpuMicros(server.child?.pid) ?? 0) - cpuBefore) / result.requests
              : 0
          cpu.set(key(c, server), [...(cpu.get(key(c, server)) ?? []), cpuUs])
          const unexpected = c.expect === 200 ? result.non2xx : result.requests - result.non2xx
          if (unexpected > 0) {
            throw new Error(`${c.id} on ${server.id}: ${unexpected} responses not ${c.expect}`)
          }
          const list = results.get(key(c, server)) ?? []
          list.push(result)
          results.set(key(c, server), list)
          console.error(
            `  [${repeat + 1}/${REPEATS}] ${c.id} · ${server.id}: ${Math.round(result.rps)} req/s`,
          )
        }
      }
    }
    const ceilingOf = (which: 'single' | 'pool') => {
      const c = cases.find(
        (x) => x.id === (which === 'single' ? 'no-auth ceiling' : 'no-auth ceiling (pool)'),
      )
      const noauth = servers.find((s) => s.id === 'fastify-noauth')
      if (!c || !noauth) return 0
      return median((results.get(key(c, noauth)) ?? []).map((r) => r.rps))
    }
    const rows: Row[] = []
    for (const c of cases) {
      const ceiling = ceilingOf(c.ceiling)
      const caseRows: Row[] = []
      for (const server of servers) {
        const list = results.get(key(c, server))
        if (!list) continue
        caseRows.push({
          case: c.id,
          server: server.id,
          role: server.role,
          rps: median(list.map((r) => r.rps)),
          p50Ms: median(list.map((r) => r.p50Ms)),
          p99Ms: median(list.map((r) => r.p99Ms)),
          repeats: list.map((r) => Math.round(r.rps)),
          cpuUsPerRequest: median(cpu.get(key(c, server)) ?? [0]),
          vsNoAuth: ceiling > 0 ? median(list.map((r) => r.rps)) / ceiling : undefined,
        })
      }
      const peerRows = caseRows.filter((r) => r.role === 'peer')
      const bestPeer = Math.max(0, ...peerRows.map((r) => r.rps))
      const bestPeerInRound = (i: number) => Math.max(0, ...peerRows.map((r) => r.repeats[i] ?? 0))
      for (const row of caseRows) {
        const server = servers.find((x) => x.id === row.server)
        // Issue #15: library mode must beat the peers (distinct JWTs: also the crypto target);
        // the worker rows are a measurement, not a target.
        const library = row.server === 'tokengate library'
        if (row.role === 'tokengate' && !server?.only) {
          if (bestPeer > 0) row.vsBestPeer = row.rps / bestPeer
          if (bestPeer > 0)
            row.roundsVsBestPeer = row.repeats.map((rps, i) => rps / bestPeerInRound(i))
          const target =
            library && !/^JWT .* distinct/.test(c.id) ? undefined : c.target?.({ ceiling, crypto })
          if (target) {
            row.target = target.label
            row.targetRps = target.rate
            row.met = row.rps >= target.rate && (bestPeer === 0 || row.rps > bestPeer)
          } else if (bestPeer > 0) {
            row.target = 'faster than peers'
            row.met = row.rps > bestPeer
          }
        }
        if (server?.only && row.server !== 'tokengate workers=1 (CPUs 0-1)') {
          const one = caseRows.find((r) => r.server === 'tokengate workers=1 (CPUs 0-1)')
          if (one) {
            const rounds = row.repeats.map((rps, i) => (rps / (one.repeats[i] ?? 0)).toFixed(2))
            row.target = `× workers=1 per round: ${rounds.join(' ')}`
          }
        }
        rows.push(row)
      }
    }
    const micro = focused ? {} : coreMicro()
    report(rows, crypto, micro, tool, [...patFloorLines(rows), ...hopRatioLines(rows)])
  } finally {
    stopServers(servers)
  }
}

function report(
  rows: Row[],
  crypto: Record<string, number>,
  micro: unknown,
  tool: string,
  hopLines: readonly string[],
) {
  const fmt = (n: number | undefined, digits = 2) => (n === undefined ? '—' : n.toFixed(digits))
  const lines = [
    '| case | server | req/s | CPU µs/req | p50 ms | p99 ms | × no-auth | × best peer | per round × best peer | tokengate target | met |',
    '|---|---|---:|---:|---:|---:|---:|---:|---|---|:-:|',
  ]
  for (const r of rows) {
    lines.push(
      `| ${r.case} | ${r.server} | ${Math.round(r.rps)} | ${fmt(r.cpuUsPerRequest, 1)} | ${fmt(r.p50Ms)} | ${fmt(r.p99Ms)} | ${fmt(r.vsNoAuth)} | ${fmt(r.vsBestPeer)} | ${r.roundsVsBestPeer?.map((x) => fmt(x)).join(' ') ?? ''} | ${r.target ? `${r.target}${r.targetRps ? ` (${Math.round(r.targetRps)})` : ''}` : ''} | ${r.met === undefined ? '' : r.met ? 'yes' : '**no**'} |`,
    )
  }
  const cryptoLines = [
    '| algorithm | verifies/s (one core, tight loop) |',
    '|---|---:|',
    ...Object.entries(crypto).map(([alg, rate]) => `| ${alg} | ${Math.round(rate)} |`),
  ]
  const facts = {
    date: new Date().toISOString(),
    node: process.version,
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    command: `npm run bench${args.length ? ` -- ${args.join(' ')}` : ''}`,
    loadTool: tool,
    pinned: haveTaskset,
    durationSec: DURATION_SEC,
    repeats: REPEATS,
    connections: CONNECTIONS,
    elapsedSec: Math.round((Date.now() - started) / 1000),
  }
  const markdown = [
    `Node ${facts.node} · ${facts.cpu} · ${facts.cores} cores · ${facts.date}`,
    `\`${facts.command}\` · ${tool}, ${CONNECTIONS} connections, ${DURATION_SEC} s × ${REPEATS} repeats (median) · servers pinned to CPU 0, load to CPU 1: ${haveTaskset ? 'yes' : 'no'} · ${facts.elapsedSec} s`,
    '',
    ...lines,
    '',
    ...hopLines,
    // A focused run measures neither.
    ...(focused
      ? []
      : [
          '',
          ...cryptoLines,
          '',
          '`authenticate` micro-benchmark (ns/op):',
          '',
          '```',
          JSON.stringify(micro, null, 2),
          '```',
        ]),
  ].join('\n')
  console.log(markdown)
  if (focused) return
  const dir = join('bench', 'results')
  mkdirSync(dir, { recursive: true })
  const stamp = facts.date.replace(/[:]/g, '-').replace(/\..*/, '')
  const name = `${stamp}${quick ? '-quick' : ''}`
  writeFileSync(
    join(dir, `${name}.json`),
    `${JSON.stringify({ facts, rows, crypto, micro }, null, 2)}\n`,
  )
  writeFileSync(join(dir, `${name}.md`), `${markdown}\n`)
  console.error(`written: bench/results/${name}.json, .md`)
}

await main()
