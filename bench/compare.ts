/**
 * CPU µs per request of the production server (`bench/servers/tokengate.ts`) of two
 * checkouts, in interleaved rounds: for before/after claims across commits. Each checkout
 * runs with its own fixtures and code; the servers take turns on CPU 0, wrk stays on CPU 1.
 *
 * Run: `node bench/compare.ts <checkoutA> <checkoutB> [--duration 4] [--repeats 3]`
 * (e.g. `git worktree add /tmp/before <commit>` and link its node_modules to this one's).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { commandExists, cpuMicros, loadTool, PRODUCTION_NODE_FLAGS, runLoad } from './load.ts'

const args = process.argv.slice(2)
const option = (name: string, fallback: number) => {
  const at = args.indexOf(`--${name}`)
  return at === -1 ? fallback : Number(args[at + 1])
}
const checkouts = args.filter((a, i) => !a.startsWith('--') && !args[i - 1]?.startsWith('--'))
if (checkouts.length !== 2) {
  console.error('usage: node bench/compare.ts <checkoutA> <checkoutB> [--duration S] [--repeats N]')
  process.exit(2)
}
const DURATION = option('duration', 4)
const REPEATS = option('repeats', 3)
const pinned = commandExists('taskset')

interface Running {
  readonly name: string
  readonly child: ChildProcess
  readonly url: string
  readonly fixtures: { patSingle: string; rs256: string; tenant: string; garbage: string }
}

async function start(checkout: string, port: number): Promise<Running> {
  const dir = resolve(checkout)
  const fixturesDir = join(tmpdir(), 'tokengate-compare', dir.replaceAll('/', '_'))
  // The checkout's own fixtures module makes (or reuses) its fixtures, in its own format.
  const fixturesModule = await import(join(dir, 'bench/fixtures.ts'))
  const fixtures = fixturesModule.loadFixtures(fixturesDir)
  const node = join(dir, 'node_modules/.bin/node')
  const argv = [...PRODUCTION_NODE_FLAGS, 'bench/servers/tokengate.ts', fixturesDir, String(port)]
  const child = pinned
    ? spawn('taskset', ['-c', '0', node, ...argv], {
        cwd: dir,
        stdio: ['ignore', 'pipe', 'inherit'],
      })
    : spawn(node, argv, { cwd: dir, stdio: ['ignore', 'pipe', 'inherit'] })
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
  for await (const line of lines) if (line.startsWith('READY')) break
  return {
    name: checkout,
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

const cases = {
  'PAT single': (f: Running['fixtures']) => ({ authorization: `Bearer ${f.patSingle}` }),
  'JWT RS256 single': (f: Running['fixtures']) => ({
    authorization: `Bearer ${f.rs256}`,
    'x-tenant-id': f.tenant,
  }),
  '401 garbage': (f: Running['fixtures']) => ({ authorization: `Bearer ${f.garbage}` }),
}

const servers = [
  await start(checkouts[0] as string, 18_901),
  await start(checkouts[1] as string, 18_902),
]
const results = new Map<string, number[]>()
try {
  for (let round = 0; round < REPEATS; round++) {
    for (const [name, headers] of Object.entries(cases)) {
      for (const server of servers) {
        const before = cpuMicros(server.child.pid)
        const load = await runLoad(
          loadTool(),
          {
            url: server.url,
            path: '/api/v1/me',
            headers: headers(server.fixtures),
            durationSec: DURATION,
            connections: 32,
          },
          pinned ? 1 : undefined,
        )
        const after = cpuMicros(server.child.pid)
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
}

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0
console.log('| case | checkout | CPU µs/req (median) | rounds |')
console.log('|---|---|---:|---|')
for (const [key, values] of results) {
  const [name, checkout] = key.split('\t')
  console.log(
    `| ${name} | ${checkout} | ${median(values).toFixed(1)} | ${values.map((v) => v.toFixed(1)).join(', ')} |`,
  )
}
