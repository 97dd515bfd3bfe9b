/**
 * Tail latency at half load (issue #26). For each case: the subject's saturation (its 2xx
 * rate with wrk, 32 connections), then the subject, its baseline and its comparisons at
 * `--load` (0.5) of that rate, evenly paced, interleaved round by round (the order flips every
 * round); p50 / p99 / p99.9 of the 2xx answers of each run, and the subject's added latency
 * (subject − baseline of the same round) per round and as the median of the rounds.
 *
 * Servers and the proxies' upstream on CPU 0 (`--split`: the upstream on CPU 1), the load
 * generator on CPU 1; see bench/latency-servers.ts and bench/latency-load.ts, and
 * bench/README.md ("Tail latency").
 *
 * Usage: node bench/latency.bench.ts [--quick] [--rounds 3] [--duration 5] [--warmup 1]
 *   [--saturation 3] [--load 0.5 | --rate N] [--connections 32] [--generator paced|hey]
 *   [--cases REGEX] [--split] [--settle 10 (s quiet before each run; 0: off)]
 *        node bench/latency.bench.ts --hops [...]  (issue #36: the decision and gateway hops
 *                                                  at 3,000 req/s, 3 rounds × 6 s)
 *        node bench/latency.bench.ts --slow-fsync 50 [...]   (PAT with and without a slow disk)
 *        node bench/latency.bench.ts --check-generators [...] (paced against hey)
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { readCli } from './cli.ts'
import { BENCH_TENANT, type Fixtures, freshJwtPool, loadFixtures } from './fixtures.ts'
import {
  bearer,
  hopCases,
  type LatencyCase,
  members,
  QUICK_CASES,
  slowFsyncCases,
  standardCases,
} from './latency-cases.ts'
import { type Generator, type LatencyRequest, type LatencyRun, runLatency } from './latency-load.ts'
import { markCpu, namedOthers, primeUntilQuiet, settle, shareSince } from './latency-machine.ts'
import {
  type CaseResult,
  count,
  type Measured,
  ms,
  otherAnswers,
  printCase,
  printSummary,
} from './latency-report.ts'
import {
  LatencyServers,
  LOAD_CPU,
  missingFor,
  type RunningServer,
  SERVER_CPU,
  type ServerId,
} from './latency-servers.ts'
import { median } from './latency-stats.ts'
import { commandExists, loadTool, runLoad } from './load.ts'
import { CAN_PIN } from './processes.ts'
import { buildSlowFsync, type SlowFsync } from './slow-fsync.ts'

const { values } = readCli({
  script: 'bench/latency.bench.ts',
  options: {
    quick: { type: 'boolean' },
    rounds: { type: 'number', integer: true },
    duration: { type: 'number', value: 'S' },
    warmup: { type: 'number', zero: true, value: 'S' },
    saturation: { type: 'number', value: 'S' },
    load: { type: 'number', value: 'SHARE', default: 0.5 },
    rate: { type: 'number', value: 'R' },
    connections: { type: 'number', integer: true, default: 32 },
    generator: { type: 'choice', choices: ['paced', 'hey'], default: 'paced' },
    cases: { type: 'regex' },
    'slow-fsync': { type: 'string', value: 'MS' },
    'check-generators': { type: 'boolean' },
    'hey-workers': { type: 'number', integer: true, default: 20 },
    hops: { type: 'boolean' },
    split: { type: 'boolean' },
    settle: { type: 'number', zero: true, value: 'S' },
  },
})
const hops = values.hops
const quick = values.quick
const setting = (given: number | undefined, full: number, short: number) =>
  given === undefined ? (quick ? short : full) : given
const ROUNDS = setting(values.rounds, 3, 1)
const DURATION = setting(values.duration, hops ? 6 : 5, 1)
const WARMUP = setting(values.warmup, 1, 0.3)
const SATURATION = setting(values.saturation, 3, 1)
/**
 * Before each measured run, until the servers were quiet this many seconds (0: not at all):
 * longer than V8's memory reducer waits (8 s) after a server's load ends before its GCs.
 */
const SETTLE = setting(values.settle, 10, 0)
/** At most this long. */
const SETTLE_MAX = 20
/** Seconds each server serves a case's traffic before the first measured round, per slice. */
const PRIME = quick ? 0.5 : 2
/** At most this many priming slices per server (see runCases). */
const PRIME_SLICES = 8
const LOAD = values.load
/** A fixed rate for every case instead of `--load` × its saturation (no saturation runs). */
const FIXED_RATE = values.rate ?? (hops ? 3000 : undefined)
const CONNECTIONS = values.connections
const GENERATOR: Generator = values.generator
const settings = { generator: GENERATOR, load: LOAD, fixedRate: FIXED_RATE }
// ---------------------------------------------------------------------------------------
// Runs

/** The subject's 2xx rate with wrk on the load CPU: the saturation the rate is half of. */
async function saturation(benchCase: LatencyCase, server: RunningServer): Promise<number> {
  const { traffic } = benchCase
  const pool =
    benchCase.saturationPool ?? (traffic.kind === 'pool' ? { file: traffic.file } : undefined)
  const request = {
    url: server.url,
    path: benchCase.path,
    headers: traffic.kind === 'fixed' ? traffic.headers : {},
    connections: 32,
    ...(pool ? { pool } : {}),
  }
  const tool = loadTool()
  if (!quick) await runLoad(tool, { ...request, durationSec: 1 }, LOAD_CPU)
  const result = await runLoad(tool, { ...request, durationSec: SATURATION }, LOAD_CPU)
  if (result.requests === 0) return 0
  return (result.rps * (result.requests - result.non2xx)) / result.requests
}

/** Per server, the next unused line of the fresh-JWT file: no server sees a token twice. */
const freshCursor = new Map<ServerId, number>()

function latencyRequest(
  benchCase: LatencyCase,
  server: ServerId,
  url: string,
  fresh: { file: string; perRun: number } | 'prime' | undefined,
): LatencyRequest {
  const { traffic, path } = benchCase
  if (traffic.kind === 'fixed') return { url, path, headers: traffic.headers }
  const wrap = (file: string, tenant?: string) => ({
    url,
    path,
    headers: {},
    pool: { file, start: 0, wrap: true, ...(tenant ? { tenant } : {}) },
  })
  if (traffic.kind === 'pool') return wrap(traffic.file)
  // Priming, and the baseline (which verifies nothing), may repeat tokens.
  if (fresh === 'prime') return wrap(benchCase.saturationPool?.file ?? '', BENCH_TENANT)
  if (!fresh) throw new Error('no fresh JWT file')
  if (server === benchCase.baseline) return wrap(fresh.file, BENCH_TENANT)
  const start = freshCursor.get(server) ?? 0
  freshCursor.set(server, start + fresh.perRun)
  return { url, path, headers: {}, pool: { file: fresh.file, start, tenant: BENCH_TENANT } }
}

const perRunRequests = (rate: number) => Math.round(WARMUP * rate) + Math.round(DURATION * rate)

async function runCases(
  cases: readonly LatencyCase[],
  servers: LatencyServers,
  fixtures: Fixtures,
  slowFsync: SlowFsync | undefined,
): Promise<CaseResult[]> {
  const results: CaseResult[] = []
  for (const benchCase of cases) {
    const saturatedServer = benchCase.saturationOf ?? benchCase.subject
    const sat = FIXED_RATE
      ? Number.NaN
      : await saturation(benchCase, await servers.get(saturatedServer))
    const rate = FIXED_RATE ?? Math.max(1, Math.round(LOAD * sat))
    progress(
      `${benchCase.id}: ${FIXED_RATE ? 'fixed' : `saturation ${Math.round(sat)} 2xx/s`} → ${rate} req/s`,
    )
    results.push({ benchCase, saturatedServer, saturation: sat, rate, rounds: [] })
  }
  const fresh = results.filter((r) => r.benchCase.traffic.kind === 'fresh-jwt')
  let freshFile: string | undefined
  if (fresh.length > 0) {
    const need = Math.max(...fresh.map((r) => perRunRequests(r.rate))) * ROUNDS * fresh.length
    progress(`signing up to ${need} fresh RS256 JWTs (cached in ${fixtures.dir})`)
    freshFile = freshJwtPool(fixtures, 'RS256', need)
  }
  // Every server serves each case's traffic once before its first measured run: JIT, caches,
  // first writes (a cold server's first second is not what the rounds compare).
  // Not quick: until V8's helper threads went quiet (latency-machine.ts primeUntilQuiet).
  for (const { benchCase, rate } of results) {
    for (const id of members(benchCase)) {
      const server = await servers.get(id)
      const slice = () =>
        runLatency('paced', latencyRequest(benchCase, id, server.url, 'prime'), {
          rate,
          durationSec: PRIME,
          warmupSec: 0,
          connections: CONNECTIONS,
          cpu: LOAD_CPU,
        })
      const { slices, helperMs } = await primeUntilQuiet(
        slice,
        () => servers.pids(),
        PRIME,
        quick ? 1 : PRIME_SLICES,
      )
      progress(
        `primed ${id}: ${slices} × ${PRIME} s, V8 helper threads ${Math.round(helperMs)} ms in the last`,
      )
    }
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const result of results) {
      const { benchCase, rate } = result
      const order = members(benchCase)
      if (round % 2 === 1) order.reverse()
      const measured = new Map<ServerId, Measured>()
      for (const id of order) {
        const server = await servers.get(id)
        const request = latencyRequest(
          benchCase,
          id,
          server.url,
          freshFile ? { file: freshFile, perRun: perRunRequests(rate) } : undefined,
        )
        const generator = request.pool ? 'paced' : GENERATOR
        // The previous run's servers finish their post-load GCs before this one is measured.
        const settled =
          SETTLE > 0 ? await settle(() => servers.pids(), SETTLE, SETTLE_MAX) : undefined
        const from = Date.now()
        const cpu = markCpu(SERVER_CPU)
        const run = await runLatency(generator, request, {
          rate,
          durationSec: DURATION,
          warmupSec: WARMUP,
          connections: CONNECTIONS,
          cpu: LOAD_CPU,
        })
        const share = shareSince(cpu)
        const { others } = share
        const who = namedOthers(share)
        const gone = await servers.exited()
        if (gone.length > 0) throw new Error(`a server's process exited: ${gone.join(', ')}`)
        const syncs = slowFsync?.callsBetween(id, from, Date.now())
        measured.set(id, {
          run,
          ours: share.ours,
          others,
          softirq: share.softirq,
          ...(who ? { otherNames: who } : {}),
          ...(syncs === undefined ? {} : { syncs }),
        })
        progress(
          `round ${round + 1} · ${benchCase.id} · ${id}: p50 ${ms(run.summary.p50Ms)} p99 ${ms(run.summary.p99Ms)} p99.9 ${ms(run.summary.p999Ms)}, bench on CPU ${SERVER_CPU} ${Math.round(share.ours)} %, others on CPU ${SERVER_CPU} ${Math.round(others)} %${who ? ` (${who})` : ''}, softirq ${Math.round(share.softirq)} %${settled ? `; settled ${settled.waitedSec.toFixed(1)} s${settled.quiet ? '' : ' (not quiet)'}` : ''}`,
        )
      }
      result.rounds.push(measured)
    }
  }
  return results
}

// ---------------------------------------------------------------------------------------
// Generator check: paced against hey on a fixed token

async function checkGenerators(servers: LatencyServers, fixtures: Fixtures): Promise<void> {
  const headers = bearer(fixtures.patSingle)
  const probe: LatencyCase = {
    id: 'PAT',
    path: '/api/v1/me',
    traffic: { kind: 'fixed', headers },
    subject: 'tokengate',
    baseline: 'fastify-noauth',
    others: [],
  }
  const sat = FIXED_RATE ? Number.NaN : await saturation(probe, await servers.get('tokengate'))
  const rate = FIXED_RATE ?? Math.max(1, Math.round(LOAD * sat))
  const workers = values['hey-workers']
  const generators: { label: string; generator: Generator; connections: number }[] = [
    { label: `paced, ${CONNECTIONS} sockets`, generator: 'paced', connections: CONNECTIONS },
    { label: 'hey -c 1', generator: 'hey', connections: 1 },
    { label: `hey -c ${workers}`, generator: 'hey', connections: workers },
  ]
  const why = FIXED_RATE ? 'fixed' : `${LOAD * 100} % of tokengate PAT's ${count(sat)} 2xx/s`
  console.log(`\n### Generators at ${count(rate)} req/s (${why}), one PAT\n`)
  console.log(
    '| round | server | generator | p50 ms | p99 ms | p99.9 ms | max ms | 2xx | not 2xx |',
  )
  console.log('|---|---|---|---:|---:|---:|---:|---:|---:|')
  const table = new Map<string, LatencyRun[]>()
  for (let round = 0; round < ROUNDS; round++) {
    for (const id of ['fastify-noauth', 'tokengate'] as const) {
      const server = await servers.get(id)
      const order = round % 2 ? [...generators].reverse() : generators
      for (const g of order) {
        const run = await runLatency(
          g.generator,
          { url: server.url, path: probe.path, headers },
          {
            rate,
            durationSec: DURATION,
            warmupSec: WARMUP,
            connections: g.connections,
            cpu: LOAD_CPU,
          },
        )
        const key = `${id} | ${g.label}`
        table.set(key, [...(table.get(key) ?? []), run])
        const s = run.summary
        console.log(
          `| ${round + 1} | ${key} | ${ms(s.p50Ms)} | ${ms(s.p99Ms)} | ${ms(s.p999Ms)} | ${ms(s.maxMs)} | ${count(s.count)} | ${otherAnswers(run)} |`,
        )
      }
    }
  }
  for (const [key, runs] of table) {
    const of = (pick: (r: LatencyRun) => number) => ms(median(runs.map(pick)))
    console.log(
      `| median | ${key} | ${of((r) => r.summary.p50Ms)} | ${of((r) => r.summary.p99Ms)} | ${of((r) => r.summary.p999Ms)} | ${of((r) => r.summary.maxMs)} | | |`,
    )
  }
}

// ---------------------------------------------------------------------------------------

function progress(line: string): void {
  process.stderr.write(`${line}\n`)
}

function header(mode: string): void {
  let commit = ''
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()
  } catch {}
  const [one, five] = loadavg()
  console.log(
    `## Tail latency (${mode}), ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC, commit ${commit}, Node ${process.versions.node}, ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}`,
  )
  console.log(
    `\n${ROUNDS} round(s) × ${DURATION} s measured after ${WARMUP} s warm-up per run${SETTLE > 0 ? `, each begun once the servers were quiet for ${SETTLE} s (at most ${SETTLE_MAX} s)` : ''}, saturation ${SATURATION} s with ${loadTool()}, ${CONNECTIONS} ${GENERATOR === 'hey' ? 'hey workers' : 'sockets'}; ${values.split ? 'servers on CPU 0, the upstream and the load on CPU 1' : 'servers and the upstream on CPU 0, the load on CPU 1'}${CAN_PIN ? '' : ' (NOT pinned: taskset or a second CPU is missing)'}; load average at start ${one?.toFixed(2)} / ${five?.toFixed(2)}. Latencies in ms; only 2xx answers count.`,
  )
}

async function main(): Promise<void> {
  if (GENERATOR === 'hey' || values['check-generators']) {
    if (!commandExists('hey')) throw new Error('hey is not installed (Debian: apt-get install hey)')
  }
  const fixtures = loadFixtures(join(tmpdir(), 'tokengate-latency-fixtures'))
  const scratch = mkdtempSync(join(tmpdir(), 'tg-latency-'))
  const slowMs = values['slow-fsync']
  const slowFsync = slowMs === undefined ? undefined : buildSlowFsync()
  // Both servers get the shim; the baseline's only counts (0 ms), so the two differ in delay only.
  const servers = new LatencyServers(
    fixtures,
    slowFsync
      ? {
          'tokengate slow-fsync': slowFsync.env(Number(slowMs), 'tokengate slow-fsync'),
          tokengate: slowFsync.env(0, 'tokengate'),
        }
      : {},
    { split: values.split },
  )
  const stopAll = async () => {
    await servers.stopAll()
    slowFsync?.cleanup()
    rmSync(scratch, { recursive: true, force: true })
  }
  process.once('SIGINT', () => void stopAll().then(() => process.exit(130)))
  try {
    if (values['check-generators']) {
      header('generator check')
      await checkGenerators(servers, fixtures)
      return
    }
    if (slowFsync) {
      header(`slow disk: every fsync + ${slowMs} ms on the tokengate server`)
      const results = await runCases(
        slowFsyncCases(fixtures, scratch),
        servers,
        fixtures,
        slowFsync,
      )
      for (const result of results) printCase(result, settings, true)
      printSummary(results)
      return
    }
    const filter = values.cases ? values.cases : quick && !hops ? QUICK_CASES : undefined
    const cases = (hops ? hopCases(fixtures) : standardCases(fixtures)).filter((c) =>
      filter ? filter.test(c.id) : !c.onlyWhenNamed,
    )
    const runnable = cases.filter((c) => {
      const missing = [c.subject, c.baseline, ...c.others].map(missingFor).find(Boolean)
      if (missing) console.log(`skipped ${c.id}: ${missing}`)
      return !missing
    })
    header(quick ? 'quick: a smoke test, numbers indicative only' : 'interleaved rounds')
    const results = await runCases(runnable, servers, fixtures, undefined)
    for (const result of results) printCase(result, settings, false)
    printSummary(results)
  } finally {
    await stopAll()
    const [one] = loadavg()
    console.log(`\nload average at the end: ${one?.toFixed(2)}`)
  }
}

await main()
