/**
 * Where one kind of request spends the server's CPU: starts one bench server under
 * `--cpu-prof` pinned to CPU 0, loads it with wrk (one case, CPU 1), and prints the server's
 * CPU µs per request and the profile's self time of the loaded window, by file and by function.
 *
 * Usage: node bench/profile.ts <tokengate|library|noauth|naive|fastify-jwt>
 *          <pat|pat-distinct|jwt|jwt-distinct|garbage|badsum|403|wrong-tenant> [--duration S] [--top N]
 *          [--interval US] [--keep] [--against CASE]
 *        node bench/profile.ts <gateway|undici-proxy|fastify-undici-proxy> proxy [...]
 *        node bench/profile.ts decision decision-pat [...]
 * (gateway mode: the proxy on CPU 0, its upstream on CPU 1 beside wrk. `decision`: wrk asks
 * the forward-auth decision listener what nginx's auth_request asks, a PAT each time.)
 * (`--keep` leaves the .cpuprofile in bench/results/profiles/ for Chrome DevTools;
 * `--interval`: the profiler's sampling interval, default 1000 µs; `--rate R`: load at R requests
 * a second, evenly paced (bench/paced-load.ts), instead of wrk's saturation, so two cases can be
 * compared at the same rate (a server's per-request overhead falls as its load rises: more
 * requests per event-loop turn and per wake-up); `--against CASE`: profiles a
 * second server process of the same kind under CASE too, and prints where the first case spends
 * more, function by function, in µs per request: e.g. `jwt-distinct --against jwt` is the
 * verified-token cache's miss path.)
 */
import type { ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { exitWithUsage, readCli } from './cli.ts'
import { loadedProfile } from './cpu-profiles.ts'
import { BENCH_TENANT, loadFixtures } from './fixtures.ts'
import { runLatency } from './latency-load.ts'
import { cpuMicros, type LoadRequest, PRODUCTION_NODE_FLAGS, runLoad } from './load.ts'
import { startNode } from './processes.ts'

const cli = {
  script: 'bench/profile.ts',
  positionals: ['[server (tokengate)]', '[case (pat)]'],
  options: {
    duration: { type: 'number', value: 'S', default: 5 },
    top: { type: 'number', integer: true, default: 30 },
    interval: { type: 'number', integer: true, value: 'US', default: 1000 },
    keep: { type: 'boolean' },
    against: { type: 'string', value: 'CASE' },
    rate: { type: 'number', zero: true, value: 'R', default: 0 },
  },
} as const
const { values, positionals } = readCli(cli)
const [serverKind = 'tokengate', caseKind = 'pat'] = positionals
const DURATION = values.duration
const TOP = values.top
const INTERVAL_US = values.interval
const RATE = values.rate
const against = values.against
const fixtures = loadFixtures()

// Each server's argv (after `node`): its port and, for proxies, the upstream's URL.
const servers: Record<string, (port: number, upstream: string) => string[]> = {
  tokengate: (port) => [
    ...PRODUCTION_NODE_FLAGS,
    'bench/servers/tokengate.ts',
    fixtures.dir,
    `${port}`,
  ],
  library: (port) => ['bench/servers/library.ts', fixtures.dir, `${port}`],
  'library-ct': (port) => [
    'bench/servers/library.ts',
    fixtures.dir,
    `${port}`,
    '--create-tokengate',
  ],
  noauth: (port) => peer('fastify-noauth', port),
  naive: (port) => peer('fastify-naive', port),
  'fastify-jwt': (port) => peer('fastify-jwt', port),
  // Gateway mode (issue #15): tokengate's production server proxying to an upstream, and
  // the bare undici proxy it is measured against. Both need the `proxy` case.
  gateway: (port, upstream) => [
    ...PRODUCTION_NODE_FLAGS,
    'bench/servers/tokengate.ts',
    fixtures.dir,
    `${port}`,
    upstream,
  ],
  // The decision listener (decision.proxy: nginx) beside the API port: wrk loads the former.
  decision: (port) => [
    ...PRODUCTION_NODE_FLAGS,
    'bench/servers/tokengate.ts',
    fixtures.dir,
    `${port}`,
    '--decision',
  ],
  'undici-proxy': (port, upstream) => ['bench/servers/undici-proxy.ts', upstream, `${port}`],
  'fastify-undici-proxy': (port, upstream) => [
    'bench/servers/undici-proxy.ts',
    upstream,
    `${port}`,
    '--fastify',
  ],
}
const PROXIES = new Set(['gateway', 'undici-proxy', 'fastify-undici-proxy'])
function peer(kind: string, port: number): string[] {
  return ['bench/servers/peer.ts', kind, 'RS256', fixtures.dir, `${port}`]
}
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const jwt = (token: string, tenant = BENCH_TENANT) => ({ ...bearer(token), 'x-tenant-id': tenant })
type ProfiledCase = Pick<LoadRequest, 'path' | 'headers' | 'pool'>
const cases: Record<string, ProfiledCase> = {
  pat: { path: '/api/v1/me', headers: bearer(fixtures.patSingle) },
  // wrk rotates through the fixtures' 10,000 PATs (the load table's "PAT distinct").
  'pat-distinct': { path: '/api/v1/me', headers: {}, pool: { file: fixtures.patPoolFile } },
  jwt: { path: '/api/v1/me', headers: jwt(fixtures.algs.RS256.single) },
  // wrk rotates through 10,000 RS256 tokens: every request misses the verified-token cache.
  'jwt-distinct': {
    path: '/api/v1/me',
    headers: {},
    pool: { file: fixtures.algs.RS256.poolFile, tenant: BENCH_TENANT },
  },
  garbage: { path: '/api/v1/me', headers: bearer(fixtures.patGarbage) },
  badsum: { path: '/api/v1/me', headers: bearer(fixtures.patBadChecksum) },
  '403': { path: '/api/v1/tokens', headers: jwt(fixtures.forbiddenJwt) },
  'wrong-tenant': { path: '/api/v1/me', headers: jwt(fixtures.algs.RS256.single, 'other') },
  // A PAT request the gateway proxies (the default policy: any authenticated caller).
  proxy: { path: '/api/v1/projects/p1', headers: bearer(fixtures.patSingle) },
  // What examples/forward-auth/nginx.conf's auth subrequest sends.
  'decision-pat': {
    path: '/_tokengate',
    headers: {
      ...bearer(fixtures.patSingle),
      'x-original-method': 'GET',
      'x-original-uri': '/api/v1/projects/p1',
      'x-forwarded-for': '127.0.0.1',
      'x-forwarded-proto': 'http',
      'x-forwarded-host': '127.0.0.1:8080',
    },
  },
}
const argvOf = servers[serverKind]
const request = cases[caseKind]
const valid = (c: string | undefined) =>
  c !== undefined &&
  c in cases &&
  PROXIES.has(serverKind) === (c === 'proxy') &&
  (serverKind === 'decision') === (c === 'decision-pat')
if (!argvOf || !request || !valid(caseKind) || (against !== undefined && !valid(against))) {
  exitWithUsage(
    cli,
    `servers: ${Object.keys(servers).join(' ')}; cases: ${Object.keys(cases).join(' ')} ` +
      `(proxy: for ${[...PROXIES].join(' and ')} only, decision-pat for decision only)`,
  )
}

interface Profiled {
  readonly rps: number
  readonly requests: number
  readonly non2xx: number
  /** The server process's CPU µs per request, profiler on. */
  readonly cpuPerRequest: number
  /** How long the profile ran, s: the window (DURATION + 0.3 s before its end) must lie inside. */
  readonly profiledSec: number
  /** Self time in the loaded window, µs, by function and by file; and their total. */
  readonly byFunction: Map<string, number>
  readonly byFile: Map<string, number>
  readonly total: number
}

/** One server process under `--cpu-prof`, loaded with one case by wrk; its profile read. */
async function profileOnce(
  argvOf: (port: number, upstream: string) => string[],
  request: ProfiledCase,
  keepAs?: string,
): Promise<Profiled> {
  const dir = mkdtempSync(join(tmpdir(), 'tg-prof-'))
  const port = 19_700 + Math.floor(Math.random() * 200)
  // A proxy's upstream shares CPU 1 with wrk, so the proxy has CPU 0 to itself.
  const upstream: ChildProcess | undefined = PROXIES.has(serverKind)
    ? (await startNode(1, peer('upstream', port + 200))).child
    : undefined
  const { child, output } = await startNode(0, [
    '--cpu-prof',
    `--cpu-prof-dir=${dir}`,
    `--cpu-prof-interval=${INTERVAL_US}`,
    ...argvOf(port, `http://127.0.0.1:${port + 200}`),
  ])
  const decisionPort = /^DECISION (\d+)/m.exec(output)?.[1]
  const url = `http://127.0.0.1:${serverKind === 'decision' ? decisionPort : port}`
  const before = { cpu: 0 }
  const loaded = async (durationSec: number) => {
    before.cpu = cpuMicros(child.pid) ?? 0
    if (!RATE) return runLoad('wrk', { ...request, url, durationSec, connections: 32 }, 1)
    const { pool, ...rest } = request
    const run = await runLatency(
      'paced',
      { ...rest, url, ...(pool ? { pool: { ...pool, start: 0, wrap: true } } : {}) },
      { rate: RATE, durationSec, warmupSec: 0, connections: 32, cpu: 1 },
    )
    const non2xx = Object.values(run.non2xx).reduce((a, b) => a + b, 0)
    return { rps: RATE, requests: run.summary.count + non2xx, non2xx }
  }
  await loaded(1)
  const result = await loaded(DURATION)
  const cpuPerRequest = ((cpuMicros(child.pid) ?? 0) - before.cpu) / result.requests
  const exited = new Promise((resolve) => child.on('exit', resolve))
  child.kill('SIGTERM')
  upstream?.kill('SIGTERM')
  await exited
  const written = readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => ({
      file: f,
      profile: JSON.parse(readFileSync(join(dir, f), 'utf8')) as CpuProfile,
    }))
  const file = loadedProfile(written.map((w) => ({ file: w.file, endTime: w.profile.endTime })))
  const profile = written.find((w) => w.file === file)?.profile
  if (!file || !profile) throw new Error(`no main thread profile in ${written.map((w) => w.file)}`)
  if (keepAs) {
    mkdirSync('bench/results/profiles', { recursive: true })
    renameSync(join(dir, file), join('bench/results/profiles', `${keepAs}.cpuprofile`))
  }
  rmSync(dir, { recursive: true, force: true })
  return {
    rps: result.rps,
    requests: result.requests,
    non2xx: result.non2xx,
    cpuPerRequest,
    profiledSec: (profile.endTime - profile.startTime) / 1e6,
    ...selfTimes(profile),
  }
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[]
  samples: number[]
  timeDeltas: number[]
  startTime: number
  endTime: number
}

/**
 * Self time by function and by file, of the busy samples of the measured window only (the
 * last DURATION seconds before shutdown).
 */
function selfTimes(profile: CpuProfile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const times: number[] = []
  let t = profile.endTime
  for (let i = profile.timeDeltas.length - 1; i >= 0; i--) {
    times[i] = t
    t -= profile.timeDeltas[i] ?? 0
  }
  const windowStart = profile.endTime - (DURATION + 0.3) * 1e6
  const byFunction = new Map<string, number>()
  const byFile = new Map<string, number>()
  let total = 0
  for (let i = 0; i < profile.samples.length; i++) {
    if ((times[i] ?? 0) < windowStart) continue
    const node = byId.get(profile.samples[i] ?? -1)
    // Waiting for the next event is not work: shares are of the busy time.
    if (!node || node.callFrame.functionName === '(idle)') continue
    const dt = profile.timeDeltas[i] ?? 0
    total += dt
    const where = shortFile(node.callFrame.url)
    const fn = `${node.callFrame.functionName || '(anonymous)'} ${where}:${node.callFrame.lineNumber + 1}`
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + dt)
    byFile.set(where, (byFile.get(where) ?? 0) + dt)
  }
  return { byFunction, byFile, total }
}

function shortFile(url: string): string {
  if (!url) return '(native)'
  const nm = url.lastIndexOf('node_modules/')
  if (nm !== -1) {
    const parts = url.slice(nm + 'node_modules/'.length).split('/')
    return parts[0]?.startsWith('@') ? `${parts[0]}/${parts[1]}` : (parts[0] ?? url)
  }
  const src = url.indexOf('/src/')
  if (src !== -1) return url.slice(src + 1)
  return url.replace(/^file:\/\//, '')
}

const keep = values.keep
const main = await profileOnce(argvOf, request, keep ? `${serverKind}-${caseKind}` : undefined)
const headline = (kind: string, p: Profiled) =>
  `${serverKind} · ${kind}: ${Math.round(p.rps)} req/s (${p.non2xx} not 2xx), ` +
  `${p.cpuPerRequest.toFixed(1)} CPU µs/req ` +
  `(process, profiler on); profile: ${(p.total / 1e3).toFixed(0)} ms busy sampled in the ` +
  `window, the last ${DURATION + 0.3} s of the main thread's ${p.profiledSec.toFixed(1)} s`
console.log(headline(caseKind, main))

if (!against) {
  const share = (us: number) => `${((100 * us) / main.total).toFixed(1).padStart(5)} %`
  const perRequest = (us: number) => (us / main.requests).toFixed(2).padStart(6)
  console.log('\nself time by file (share, µs/req):')
  for (const [where, us] of [...main.byFile].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
    console.log(`${share(us)} ${perRequest(us)}  ${where}`)
  }
  console.log('\nself time by function:')
  for (const [fn, us] of [...main.byFunction].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
    console.log(`${share(us)} ${perRequest(us)}  ${fn}`)
  }
} else {
  const other = await profileOnce(
    argvOf,
    cases[against] as ProfiledCase,
    keep ? `${serverKind}-${against}` : undefined,
  )
  console.log(headline(against, other))
  // Profile µs per request: the main thread's busy samples (JS, and the native and kernel
  // work it calls); not scaled to CPU µs/req, which also counts other threads and the kernel's
  // wake-ups between events (the profiler sees those as idle).
  const perRequest = (p: Profiled, us: number | undefined) => (us ?? 0) / p.requests
  const diff = (a: Map<string, number>, b: Map<string, number>) =>
    [...new Set([...a.keys(), ...b.keys()])]
      .map((key) => {
        const mine = perRequest(main, a.get(key))
        const theirs = perRequest(other, b.get(key))
        return { key, mine, theirs, delta: mine - theirs }
      })
      .sort((x, y) => y.delta - x.delta)
  const row = (r: { key: string; mine: number; theirs: number; delta: number }) =>
    `${r.delta.toFixed(2).padStart(7)} ${r.mine.toFixed(2).padStart(7)} ${r.theirs.toFixed(2).padStart(7)}  ${r.key}`
  const busy = (p: Profiled) => p.total / p.requests
  console.log(
    `\nCPU µs/req (process): ${caseKind} ${main.cpuPerRequest.toFixed(1)} − ${against} ${other.cpuPerRequest.toFixed(1)} = ${(main.cpuPerRequest - other.cpuPerRequest).toFixed(1)}` +
      `\nprofile busy µs/req (main thread): ${busy(main).toFixed(1)} − ${busy(other).toFixed(1)} = ${(busy(main) - busy(other)).toFixed(1)}`,
  )
  console.log(`\nby file:   Δ µs/req, ${caseKind}, ${against}`)
  for (const r of diff(main.byFile, other.byFile).slice(0, TOP)) console.log(row(r))
  console.log(`\nby function: Δ µs/req, ${caseKind}, ${against}`)
  for (const r of diff(main.byFunction, other.byFunction).slice(0, TOP)) console.log(row(r))
}
