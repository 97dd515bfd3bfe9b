/**
 * CPU µs per request of the production server (`bench/servers/tokengate.ts`) of two
 * checkouts, in interleaved rounds: for before/after claims across commits. Each checkout
 * runs with its own fixtures and code; the servers take turns on CPU 0, wrk stays on CPU 1.
 *
 * Run: `node bench/compare.ts <checkoutA> <checkoutB> [--duration 4] [--repeats 3] [--gateway]
 * [--flags-a '...'] [--flags-b '...']` (e.g. `git worktree add /tmp/before <commit>` and link its
 * node_modules to this one's).
 *
 * `--flags-a` / `--flags-b`: Node flags added to that checkout's server after the production
 * ones, e.g. `node bench/compare.ts . . --flags-b --no-maglev` for a V8 flag's cost on one tree.
 *
 * `--first N`: the cost of a start instead: each round starts both servers afresh (in turn,
 * the order alternating) and reads each one's CPU (every thread: the JIT compiles on helper
 * threads) from READY to its Nth answer of the first case, 16 requests in flight.
 *
 * `--gateway`: both servers in gateway mode, proxying a PAT request to one small upstream
 * (on CPU 1, beside wrk), with the bare undici proxy (`servers/undici-proxy.ts`, the floor
 * issue #15's gateway target is measured against) and the same relay behind a bare Fastify
 * route in every round.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { Agent, request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { readCli } from './cli.ts'
import { fixturesDir } from './fixtures.ts'
import { median } from './latency-stats.ts'
import { commandExists, cpuMicros, loadTool, PRODUCTION_NODE_FLAGS, runLoad } from './load.ts'

const { values, positionals: checkouts } = readCli({
  script: 'bench/compare.ts',
  positionals: ['<checkoutA>', '<checkoutB>'],
  options: {
    duration: { type: 'number', value: 'S', default: 4 },
    repeats: { type: 'number', integer: true, default: 3 },
    gateway: { type: 'boolean' },
    'flags-a': { type: 'flags', default: '' },
    'flags-b': { type: 'flags', default: '' },
    first: { type: 'number', integer: true, zero: true, default: 0 },
  },
})
const DURATION = values.duration
const GATEWAY = values.gateway
const REPEATS = values.repeats
const FIRST = values.first
const FLAGS = [values['flags-a'], values['flags-b']].map((flags) =>
  flags.split(' ').filter(Boolean),
) as [string[], string[]]
const pinned = commandExists('taskset')

interface Running {
  readonly name: string
  readonly child: ChildProcess
  readonly url: string
  readonly fixtures: { patSingle: string; rs256: string; tenant: string; garbage: string }
}

/**
 * `node argv` in `cwd`, pinned to `cpu`; resolves with the port it prints (`READY <port>`),
 * and fails if it exits first (a port taken by another run must not go unnoticed).
 */
async function startReady(
  cwd: string,
  cpu: number,
  argv: string[],
): Promise<{ child: ChildProcess; port: number }> {
  const node = join(cwd, 'node_modules/.bin/node')
  const child = pinned
    ? spawn('taskset', ['-c', String(cpu), node, ...argv], {
        cwd,
        stdio: ['ignore', 'pipe', 'inherit'],
      })
    : spawn(node, argv, { cwd, stdio: ['ignore', 'pipe', 'inherit'] })
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
  for await (const line of lines) {
    if (line.startsWith('READY')) return { child, port: Number(line.split(' ')[1]) }
  }
  throw new Error(`${argv.join(' ')} exited before it was ready`)
}

// The upstream (peer.ts) listens on the port it is given: a random one, so that two runs on
// one machine never share it; the other servers take any free port (0) and print it.
const UPSTREAM_PORT = 20_000 + Math.floor(Math.random() * 10_000)
const upstreamUrl = `http://127.0.0.1:${UPSTREAM_PORT}`

async function start(checkout: string, flags: readonly string[]): Promise<Running> {
  const dir = resolve(checkout)
  const fixturesDir = join(tmpdir(), 'tokengate-compare', dir.replaceAll('/', '_'))
  // The checkout's own fixtures module makes (or reuses) its fixtures, in its own format.
  const fixturesModule = await import(join(dir, 'bench/fixtures.ts'))
  const fixtures = fixturesModule.loadFixtures(fixturesDir)
  // fixtures.dir, not fixturesDir: the generation loaded here, should another run regenerate.
  const argv = [...PRODUCTION_NODE_FLAGS, ...flags, 'bench/servers/tokengate.ts', fixtures.dir, '0']
  if (GATEWAY) argv.push(upstreamUrl)
  const { child, port } = await startReady(dir, 0, argv)
  return {
    // One tree twice (with other flags) must still give two rows.
    name: flags.length > 0 ? `${checkout} ${flags.join(' ')}` : checkout,
    child,
    url: `http://127.0.0.1:${port}`,
    fixtures: {
      patSingle: fixtures.patSingle,
      rs256: fixtures.algs.RS256.single,
      tenant: fixturesModule.BENCH_TENANT,
      garbage: fixtures.patGarbage,
    },
  }
}

type Case = (f: Running['fixtures']) => { path: string; headers: Record<string, string> }
const me = (headers: Record<string, string>) => ({ path: '/api/v1/me', headers })
const cases: Record<string, Case> = GATEWAY
  ? {
      'proxied PAT': (f) => ({
        path: '/api/v1/projects/p1',
        headers: { authorization: `Bearer ${f.patSingle}` },
      }),
    }
  : {
      'PAT single': (f) => me({ authorization: `Bearer ${f.patSingle}` }),
      'JWT RS256 single': (f) =>
        me({ authorization: `Bearer ${f.rs256}`, 'x-tenant-id': f.tenant }),
      '401 garbage': (f) => me({ authorization: `Bearer ${f.garbage}` }),
    }

/** The cases answered 401 by design. */
const REFUSED = new Set(['401 garbage'])

const here = resolve(import.meta.dirname, '..')
const upstream = GATEWAY
  ? (
      await startReady(here, 1, [
        'bench/servers/peer.ts',
        'upstream',
        'RS256',
        fixturesDir(),
        `${UPSTREAM_PORT}`,
      ])
    ).child
  : undefined
/** `count` requests to `server`, `inFlight` at a time on kept-alive connections; the non-2xx. */
async function sendCount(server: Running, count: number, inFlight = 16): Promise<number> {
  const { path, headers } = (Object.values(cases)[0] as Case)(server.fixtures)
  const { hostname, port } = new URL(server.url)
  const agent = new Agent({ keepAlive: true, maxSockets: inFlight })
  let sent = 0
  let refused = 0
  const one = () =>
    new Promise<void>((done, fail) => {
      const req = httpRequest({ host: hostname, port, path, headers, agent }, (res) => {
        if ((res.statusCode ?? 0) >= 300) refused++
        res.resume().once('end', done)
      })
      req.once('error', fail).end()
    })
  const lane = async () => {
    while (sent < count) {
      sent++
      await one()
    }
  }
  await Promise.all(Array.from({ length: inFlight }, lane))
  agent.destroy()
  return refused
}

if (FIRST > 0) {
  const spent: [number[], number[]] = [[], []]
  const names: string[] = []
  try {
    for (let round = 0; round < REPEATS; round++) {
      for (const k of round % 2 === 0 ? [0, 1] : [1, 0]) {
        const server = await start(checkouts[k] as string, FLAGS[k] as readonly string[])
        names[k] = server.name
        const before = cpuMicros(server.child.pid) ?? 0
        const refused = await sendCount(server, FIRST)
        const ms = ((cpuMicros(server.child.pid) ?? 0) - before) / 1000
        server.child.kill('SIGTERM')
        await new Promise((done) => server.child.once('exit', done))
        if (refused > 0) throw new Error(`${server.name}: ${refused} of ${FIRST} not 2xx`)
        spent[k as 0 | 1].push(ms)
        console.error(
          `round ${round + 1} ${server.name}: ${ms.toFixed(0)} ms CPU, ${FIRST} answers`,
        )
      }
    }
  } finally {
    upstream?.kill('SIGTERM')
  }
  const ratios = spent[1].map((b, i) => b / (spent[0][i] ?? Number.NaN))
  console.log(`| checkout | CPU ms from READY to answer ${FIRST} (median) | rounds |`)
  console.log('|---|---:|---|')
  for (const k of [0, 1] as const) {
    const row = spent[k].map((v) => v.toFixed(0)).join(', ')
    console.log(`| ${names[k]} | ${median(spent[k]).toFixed(0)} | ${row} |`)
  }
  console.log(
    `\nB / A per round: ${ratios.map((r) => r.toFixed(2)).join(', ')}; median ${median(ratios).toFixed(2)}`,
  )
  process.exit(0)
}

const servers = [
  await start(checkouts[0] as string, FLAGS[0]),
  await start(checkouts[1] as string, FLAGS[1]),
]
if (GATEWAY) {
  const references = [
    ['bare undici proxy', []],
    ['Fastify + undici proxy', ['--fastify']],
  ] as const
  for (const [name, flags] of references) {
    const argv = ['bench/servers/undici-proxy.ts', upstreamUrl, '0', ...flags]
    const { child, port } = await startReady(here, 0, argv)
    servers.push({
      name,
      child,
      url: `http://127.0.0.1:${port}`,
      fixtures: (servers[0] as Running).fixtures,
    })
  }
}
const results = new Map<string, number[]>()
try {
  // Warm-up, not measured: JIT, connection pools and caches of every server and case.
  for (const [, request] of Object.entries(cases)) {
    for (const server of servers) {
      const warm = { url: server.url, ...request(server.fixtures), durationSec: 2, connections: 32 }
      await runLoad(loadTool(), warm, pinned ? 1 : undefined)
    }
  }
  for (let round = 0; round < REPEATS; round++) {
    for (const [name, request] of Object.entries(cases)) {
      for (const server of servers) {
        const before = cpuMicros(server.child.pid)
        const load = await runLoad(
          loadTool(),
          {
            url: server.url,
            ...request(server.fixtures),
            durationSec: DURATION,
            connections: 32,
          },
          pinned ? 1 : undefined,
        )
        const after = cpuMicros(server.child.pid)
        // A row of refusals (or of another server's answers) is not a measurement of this case.
        if (load.non2xx > 0 !== REFUSED.has(name)) {
          throw new Error(`${name} on ${server.name}: ${load.non2xx} of ${load.requests} not 2xx`)
        }
        const perRequest = ((after ?? 0) - (before ?? 0)) / load.requests
        const key = `${name}\t${server.name}`
        results.set(key, [...(results.get(key) ?? []), perRequest])
        console.error(
          `round ${round + 1} ${name} ${server.name}: ${load.rps.toFixed(0)} req/s, ${perRequest.toFixed(1)} µs CPU/req`,
        )
      }
    }
  }
} finally {
  for (const server of servers) server.child.kill('SIGTERM')
  upstream?.kill('SIGTERM')
}

console.log('| case | checkout | CPU µs/req (median) | rounds |')
console.log('|---|---|---:|---|')
for (const [key, values] of results) {
  const [name, checkout] = key.split('\t')
  console.log(
    `| ${name} | ${checkout} | ${median(values).toFixed(1)} | ${values.map((v) => v.toFixed(1)).join(', ')} |`,
  )
}

// The same round's figures side by side: on a shared machine a round's drift hits both.
console.log('\n| case | B / A per round | median | rounds B below A |')
console.log('|---|---|---:|---:|')
for (const name of Object.keys(cases)) {
  const a = results.get(`${name}\t${(servers[0] as Running).name}`) ?? []
  const b = results.get(`${name}\t${(servers[1] as Running).name}`) ?? []
  const ratios = b.map((value, i) => value / (a[i] ?? Number.NaN))
  console.log(
    `| ${name} | ${ratios.map((r) => r.toFixed(2)).join(', ')} | ${median(ratios).toFixed(2)} | ` +
      `${ratios.filter((r) => r < 1).length} of ${ratios.length} |`,
  )
}
