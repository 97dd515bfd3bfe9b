/**
 * Where one kind of request spends the server's CPU: starts one bench server under
 * `--cpu-prof` pinned to CPU 0, loads it with wrk (one case, CPU 1), and prints the server's
 * CPU µs per request and the profile's self time of the loaded window, by file and by function.
 *
 * Usage: node bench/profile.ts <tokengate|library|noauth|naive|fastify-jwt>
 *          <pat|jwt|garbage|badsum|403|wrong-tenant> [--duration S] [--top N] [--keep]
 *        node bench/profile.ts <gateway|undici-proxy|fastify-undici-proxy> proxy [...]
 * (gateway mode: the proxy on CPU 0, its upstream on CPU 1 beside wrk.)
 * (`--keep` leaves the .cpuprofile in bench/results/profiles/ for Chrome DevTools.)
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BENCH_TENANT, loadFixtures } from './fixtures.ts'
import { cpuMicros, PRODUCTION_NODE_FLAGS, runLoad } from './load.ts'

const [serverKind = 'tokengate', caseKind = 'pat', ...rest] = process.argv.slice(2)
const option = (name: string, fallback: number) => {
  const at = rest.indexOf(`--${name}`)
  return at === -1 ? fallback : Number(rest[at + 1])
}
const DURATION = option('duration', 5)
const TOP = option('top', 30)
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
const cases: Record<string, { path: string; headers: Record<string, string> }> = {
  pat: { path: '/api/v1/me', headers: bearer(fixtures.patSingle) },
  jwt: { path: '/api/v1/me', headers: jwt(fixtures.algs.RS256.single) },
  garbage: { path: '/api/v1/me', headers: bearer(fixtures.patGarbage) },
  badsum: { path: '/api/v1/me', headers: bearer(fixtures.patBadChecksum) },
  '403': { path: '/api/v1/tokens', headers: jwt(fixtures.forbiddenJwt) },
  'wrong-tenant': { path: '/api/v1/me', headers: jwt(fixtures.algs.RS256.single, 'other') },
  // A PAT request the gateway proxies (the default policy: any authenticated caller).
  proxy: { path: '/api/v1/projects/p1', headers: bearer(fixtures.patSingle) },
}
const argvOf = servers[serverKind]
const request = cases[caseKind]
if (!argvOf || !request || PROXIES.has(serverKind) !== (caseKind === 'proxy')) {
  console.error(
    `servers: ${Object.keys(servers).join(' ')}; cases: ${Object.keys(cases).join(' ')} ` +
      `(proxy: for ${[...PROXIES].join(' and ')} only)`,
  )
  process.exit(2)
}

const dir = mkdtempSync(join(tmpdir(), 'tg-prof-'))
const port = 19_700 + Math.floor(Math.random() * 200)
// A proxy's upstream shares CPU 1 with wrk, so the proxy has CPU 0 to itself.
const upstream = PROXIES.has(serverKind)
  ? await startPinned(1, peer('upstream', port + 200))
  : undefined
const child = await startPinned(0, [
  '--cpu-prof',
  `--cpu-prof-dir=${dir}`,
  ...argvOf(port, `http://127.0.0.1:${port + 200}`),
])

/** Starts `node argv` pinned to `cpu`; resolves once it prints READY. */
async function startPinned(cpu: number, argv: string[]): Promise<ChildProcess> {
  const started = spawn('taskset', ['-c', `${cpu}`, process.execPath, ...argv], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  await new Promise<void>((resolve, reject) => {
    let out = ''
    started.stdout?.on('data', (chunk) => {
      out += chunk
      if (out.includes('READY')) resolve()
    })
    started.on('exit', (code) => reject(new Error(`${argv.join(' ')} exited with ${code}`)))
  })
  started.removeAllListeners('exit')
  return started
}
const url = `http://127.0.0.1:${port}`
await runLoad('wrk', { ...request, url, durationSec: 1, connections: 32 }, 1)
const before = cpuMicros(child.pid) ?? 0
const result = await runLoad('wrk', { ...request, url, durationSec: DURATION, connections: 32 }, 1)
const cpuPerRequest = ((cpuMicros(child.pid) ?? 0) - before) / result.requests
const exited = new Promise((resolve) => child.on('exit', resolve))
child.kill('SIGTERM')
upstream?.kill('SIGTERM')
await exited

interface Node {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
}
const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'))
if (!file) throw new Error('no profile written')
const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as {
  nodes: Node[]
  samples: number[]
  timeDeltas: number[]
  endTime: number
}
if (rest.includes('--keep')) {
  mkdirSync('bench/results/profiles', { recursive: true })
  renameSync(
    join(dir, file),
    join('bench/results/profiles', `${serverKind}-${caseKind}.cpuprofile`),
  )
}
rmSync(dir, { recursive: true, force: true })

// Only the samples of the measured window (the last DURATION seconds before shutdown).
const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const times: number[] = []
let t = profile.endTime
for (let i = profile.timeDeltas.length - 1; i >= 0; i--) {
  times[i] = t
  t -= profile.timeDeltas[i] ?? 0
}
const windowStart = profile.endTime - (DURATION + 0.3) * 1e6
const selfByFunction = new Map<string, number>()
const selfByFile = new Map<string, number>()
let total = 0
for (let i = 0; i < profile.samples.length; i++) {
  if ((times[i] ?? 0) < windowStart) continue
  const node = byId.get(profile.samples[i] ?? -1)
  if (!node) continue
  const dt = profile.timeDeltas[i] ?? 0
  total += dt
  const where = shortFile(node.callFrame.url)
  const fn = `${node.callFrame.functionName || '(anonymous)'} ${where}:${node.callFrame.lineNumber + 1}`
  selfByFunction.set(fn, (selfByFunction.get(fn) ?? 0) + dt)
  selfByFile.set(where, (selfByFile.get(where) ?? 0) + dt)
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

const share = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)} %`
const perRequest = (us: number) => (us / result.requests).toFixed(2).padStart(6)
console.log(
  `${serverKind} · ${caseKind}: ${Math.round(result.rps)} req/s, ${cpuPerRequest.toFixed(1)} CPU µs/req ` +
    `(process, profiler on); profile: ${(total / 1e3).toFixed(0)} ms sampled in the window`,
)
console.log('\nself time by file (share, µs/req):')
for (const [where, us] of [...selfByFile].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
  console.log(`${share(us)} ${perRequest(us)}  ${where}`)
}
console.log('\nself time by function:')
for (const [fn, us] of [...selfByFunction].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
  console.log(`${share(us)} ${perRequest(us)}  ${fn}`)
}
