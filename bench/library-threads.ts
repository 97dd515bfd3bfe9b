/**
 * CPU per answered request of each thread of the library servers at saturation (issue #36):
 * where `createTokengate`'s extra over the bare library and the naive SHA-256+Map peer goes,
 * its SQLite writer thread apart from the main thread.
 *
 * Rows (`--servers`): `library` (bench/servers/library.ts, the bare core), `createTokengate`
 * (the same with `--create-tokengate`), `createTokengate-no-limits` (rate limiting off: no
 * counts, no RateLimit pair), `naive` (bench/servers/peer.ts fastify-naive), and
 * `createTokengate@<dir>` for another checkout's (e.g. `git archive <rev> | tar -x -C <dir>`
 * with `node_modules` linked). Every row is started once on CPU 0; each round loads every row
 * in turn (order rotated round by round) with autocannon closed-loop from this process, which
 * should run on CPU 1 (`taskset -c 1 node bench/library-threads.ts`), as bench/run.ts does.
 * Printed per row and round: 2xx answers per second, CPU µs per 2xx of the `main` thread and of
 * the others grouped by thread name (`/proc/<pid>/task/<tid>/schedstat`, ns; createTokengate's
 * SQLite writer is `WorkerThread`, V8's helpers `V8Worker`), and the
 * process's total. The last lines are each row's median over the rounds.
 *
 * Run: `taskset -c 1 node bench/library-threads.ts [--rounds 5] [--duration 5] [--warmup 2]
 * [--connections 32] [--servers library,createTokengate,naive] [--path /api/v1/me]`
 */
import { readdirSync, readFileSync } from 'node:fs'
import { readCli } from './cli.ts'
import { loadFixtures } from './fixtures.ts'
import { median } from './latency-stats.ts'
import { runLoad } from './load.ts'
import { freePort, type Started, startNode, stop } from './processes.ts'

const { values } = readCli({
  script: 'bench/library-threads.ts',
  options: {
    rounds: { type: 'number', integer: true, default: 5 },
    duration: { type: 'number', value: 'S', default: 5 },
    warmup: { type: 'number', value: 'S', default: 2 },
    connections: { type: 'number', integer: true, default: 32 },
    servers: { type: 'string', value: 'A,B', default: 'library,createTokengate,naive' },
    path: { type: 'string', value: 'PATH', default: '/api/v1/me' },
  },
})
const ROUNDS = values.rounds
const DURATION = values.duration
const WARMUP = values.warmup
const CONNECTIONS = values.connections
const SERVER_CPU = 0
const fixtures = loadFixtures()
const HEADERS = { authorization: `Bearer ${fixtures.patSingle}` }

interface Row {
  readonly name: string
  readonly server: Started
  readonly url: string
  readonly rounds: Measured[]
}

interface Measured {
  readonly rps: number
  /** CPU µs per 2xx answer by thread name, and `total`. */
  readonly us: Map<string, number>
}

/** CPU ms of each thread of `pid` so far; threads of one name (less a trailing number) summed. */
function threadCpuMs(pid: number): Map<string, number> {
  const out = new Map<string, number>()
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    let name: string
    let ns: number
    try {
      name = readFileSync(`/proc/${pid}/task/${task}/comm`, 'latin1').trim()
      ns = Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'latin1').split(' ')[0])
    } catch {
      continue // the thread ended
    }
    const key = task === String(pid) ? 'main' : name.replace(/\d+$/, '#')
    out.set(key, (out.get(key) ?? 0) + ns / 1e6)
  }
  return out
}

async function startRow(name: string): Promise<Row> {
  const [kind = name, checkout] = name.split('@')
  const port = await freePort()
  const root = checkout ?? '.'
  const argv =
    kind === 'naive'
      ? [`${root}/bench/servers/peer.ts`, 'fastify-naive', 'RS256', fixtures.dir, `${port}`]
      : kind === 'library'
        ? [`${root}/bench/servers/library.ts`, fixtures.dir, `${port}`]
        : kind === 'createTokengate' || kind === 'createTokengate-no-limits'
          ? [
              `${root}/bench/servers/library.ts`,
              '--create-tokengate',
              ...(kind === 'createTokengate' ? [] : ['--no-limits']),
              fixtures.dir,
              `${port}`,
            ]
          : undefined
  if (!argv) throw new Error(`unknown server ${kind}`)
  const server = await startNode(SERVER_CPU, argv)
  return { name, server, url: `http://127.0.0.1:${port}`, rounds: [] }
}

async function load(row: Row, seconds: number) {
  return runLoad('autocannon', {
    url: row.url,
    path: values.path,
    headers: HEADERS,
    durationSec: seconds,
    connections: CONNECTIONS,
  })
}

async function measure(row: Row): Promise<Measured> {
  await load(row, WARMUP)
  const pid = row.server.child.pid as number
  const before = threadCpuMs(pid)
  const result = await load(row, DURATION)
  const after = threadCpuMs(pid)
  const ok = result.requests - result.non2xx
  const us = new Map<string, number>()
  let total = 0
  for (const [thread, ms] of after) {
    const spent = ms - (before.get(thread) ?? 0)
    total += spent
    if (spent > 0) us.set(thread, (spent * 1000) / ok)
  }
  us.set('total', (total * 1000) / ok)
  return { rps: ok / DURATION, us }
}

const format = (m: Measured) =>
  `${Math.round(m.rps)} 2xx/s · ${[...m.us]
    .filter(([, v]) => v >= 0.001)
    .map(([k, v]) => `${k} ${v.toFixed(v < 0.1 ? 3 : 2)}`)
    .join(' · ')}`

const rows: Row[] = []
try {
  for (const name of values.servers.split(',')) rows.push(await startRow(name))
  console.log(`load ${readFileSync('/proc/loadavg', 'utf8').trim()}`)
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < rows.length; i++) {
      const row = rows[(i + round) % rows.length] as Row
      const m = await measure(row)
      row.rounds.push(m)
      console.log(`[${round + 1}/${ROUNDS}] ${row.name}: ${format(m)}`)
    }
  }
  console.log(`load ${readFileSync('/proc/loadavg', 'utf8').trim()}`)
  for (const row of rows) {
    const threads = new Set(row.rounds.flatMap((m) => [...m.us.keys()]))
    const us = new Map(
      [...threads].map((t) => [t, median(row.rounds.map((m) => m.us.get(t) ?? 0))]),
    )
    console.log(`median ${row.name}: ${format({ rps: median(row.rounds.map((m) => m.rps)), us })}`)
  }
} finally {
  for (const row of rows) await stop(row.server.child)
}
