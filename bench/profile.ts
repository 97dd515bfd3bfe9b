/**
 * Where one kind of request spends the server's CPU: starts one bench server under
 * `--cpu-prof` pinned to CPU 0, loads it with wrk (one case, CPU 1), and prints the server's
 * CPU µs per request and the profile's self time of the loaded window, by file and by function.
 *
 * Usage: node bench/profile.ts <tokengate|library|noauth|naive|fastify-jwt>
 *          <pat|jwt|garbage|badsum|403|wrong-tenant> [--duration S] [--top N] [--keep]
 * (`--keep` leaves the .cpuprofile in bench/results/profiles/ for Chrome DevTools.)
 */
import { spawn } from 'node:child_process'
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

const servers: Record<string, string[]> = {
  tokengate: [...PRODUCTION_NODE_FLAGS, 'bench/servers/tokengate.ts', fixtures.dir],
  library: ['bench/servers/library.ts', fixtures.dir],
  noauth: ['bench/servers/peer.ts', 'fastify-noauth', 'RS256', fixtures.dir],
  naive: ['bench/servers/peer.ts', 'fastify-naive', 'RS256', fixtures.dir],
  'fastify-jwt': ['bench/servers/peer.ts', 'fastify-jwt', 'RS256', fixtures.dir],
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
}
const argv = servers[serverKind]
const request = cases[caseKind]
if (!argv || !request) {
  console.error(
    `servers: ${Object.keys(servers).join(' ')}; cases: ${Object.keys(cases).join(' ')}`,
  )
  process.exit(2)
}

const dir = mkdtempSync(join(tmpdir(), 'tg-prof-'))
const port = 19_700 + Math.floor(Math.random() * 200)
const child = spawn(
  'taskset',
  ['-c', '0', process.execPath, '--cpu-prof', `--cpu-prof-dir=${dir}`, ...argv, String(port)],
  { stdio: ['ignore', 'pipe', 'inherit'] },
)
await new Promise<void>((resolve, reject) => {
  let out = ''
  child.stdout?.on('data', (chunk) => {
    out += chunk
    if (out.includes('READY')) resolve()
  })
  child.on('exit', (code) => reject(new Error(`server exited with ${code}`)))
})
const url = `http://127.0.0.1:${port}`
await runLoad('wrk', { ...request, url, durationSec: 1, connections: 32 }, 1)
const before = cpuMicros(child.pid) ?? 0
const result = await runLoad('wrk', { ...request, url, durationSec: DURATION, connections: 32 }, 1)
const cpuPerRequest = ((cpuMicros(child.pid) ?? 0) - before) / result.requests
child.removeAllListeners('exit')
const exited = new Promise((resolve) => child.on('exit', resolve))
child.kill('SIGTERM')
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
