/**
 * Where the hops' slow answers at a fixed rate come from (issue #36): the rows of
 * `latency.bench.ts --hops` (gateway, bare undici proxy, nginx + decision over TCP and over a
 * Unix socket, nginx alone) run with bench/latency-probe.ts preloaded into every Node process
 * of the path (gateway with its decision listener, the unix row's second gateway, upstream,
 * undici proxy) and into the load generator, and the generator's
 * per-request trace; then every episode of slow answers (latency over `--slow` ms, due within
 * 5 ms of each other) is printed beside the event-loop stalls and GCs that overlap it, with
 * each stall's split into the main thread's own CPU, its wait for a CPU (run queue) and the
 * whole process's CPU. Times are ms from the start of the measured window.
 *
 * Usage: node bench/latency-stalls.ts [--rows REGEX] [--rounds 2] [--rate 3000]
 *   [--duration 6] [--warmup 1] [--slow 2] [--settle 10 (s quiet before each run; 0: off)]
 *   [--dir DIR (kept; default a temp dir, removed)]
 *        node bench/latency-stalls.ts --report DIR   (the episodes of a kept run again)
 */
import { spawn } from 'node:child_process'
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { readCli } from './cli.ts'
import { loadFixtures } from './fixtures.ts'
import { bearer } from './latency-cases.ts'
import { markCpu, namedOthers, primeUntilQuiet, settle, shareSince } from './latency-machine.ts'
import {
  LatencyServers,
  LOAD_CPU,
  missingFor,
  SERVER_CPU,
  type ServerId,
} from './latency-servers.ts'
import { percentile } from './latency-stats.ts'
import { pinned } from './processes.ts'

const PROBE = join(import.meta.dirname, 'latency-probe.ts')
const ROWS: readonly ServerId[] = [
  'gateway',
  'undici proxy',
  'nginx + decision',
  'nginx + decision (unix)',
  'nginx',
]
/** The Node processes of the path that get the probe. */
const PROBED: readonly ServerId[] = ['gateway', 'upstream', 'undici proxy', 'decision socket']

export interface Stall {
  readonly stall: number
  readonly gap: number
  readonly run: number
  readonly wait: number
  readonly proc: number
  /** CPU ms of the process's other threads around the gap, by thread name. */
  readonly threads?: Record<string, number>
}
interface Gc {
  readonly gc: number
  readonly ms: number
  readonly kind?: number
  /** A worker thread's isolate (the SQLite writer): its name. */
  readonly thread?: string
}
interface Log {
  readonly stalls: Stall[]
  /** The main thread's GCs. */
  readonly gcs: Gc[]
  /** Worker threads' GCs. */
  readonly threadGcs: Gc[]
}

const slug = (id: string) => id.replace(/[^a-z0-9]+/gi, '-')
const probeEnv = (log: string) => ({ NODE_OPTIONS: `--import=${PROBE}`, TG_STALL_LOG: log })

function readLog(file: string): Log {
  const log: Log = { stalls: [], gcs: [], threadGcs: [] }
  if (!existsSync(file)) return log
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line) continue
    const record = JSON.parse(line) as Stall | Gc
    if ('stall' in record) log.stalls.push(record)
    else if (record.thread) log.threadGcs.push(record)
    else log.gcs.push(record)
  }
  return log
}

/** One run of the paced generator with the probe and a trace; resolves when it exits. */
function generate(url: string, path: string, headers: Record<string, string>, o: RunOptions) {
  const argv = [
    join(import.meta.dirname, 'paced-load.ts'),
    ...['--url', url, '--path', path, '--rate', String(o.rate)],
    ...['--duration', String(o.duration), '--warmup', String(o.warmup), '--trace', o.trace],
  ]
  for (const [name, value] of Object.entries(headers)) argv.push('--header', `${name}: ${value}`)
  const [command, args] = pinned(LOAD_CPU, process.execPath, argv)
  const child = spawn(command, args, {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...probeEnv(o.log) },
  })
  let out = ''
  child.stdout.on('data', (chunk) => {
    out += chunk
  })
  return new Promise<string>((resolve, reject) =>
    child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`exit ${code}`)))),
  )
}

interface RunOptions {
  readonly rate: number
  readonly duration: number
  readonly warmup: number
  readonly trace: string
  readonly log: string
}

/** The run's episodes of slow answers and what overlapped them, printed. */
function report(dir: string, run: string, slowMs: number, warmup: number): void {
  const bytes = readFileSync(join(dir, `${run}.trace`))
  const trace = new Float64Array(bytes.buffer, bytes.byteOffset, bytes.length / 8)
  const total = trace.length / 5
  const rate = 1000 / ((trace[5] as number) - (trace[0] as number))
  const first = Math.round(warmup * rate)
  const origin = trace[first * 5] as number
  const at = (t: number) => (t - origin).toFixed(1)
  const latencies: number[] = []
  const slow: number[] = []
  for (let i = first; i < total; i++) {
    const [due, , sent, done, status] = trace.subarray(i * 5, i * 5 + 5)
    const code = status as number
    if (!(code >= 200 && code < 300)) continue
    const latency = (done as number) - Math.min(due as number, sent as number)
    latencies.push(latency)
    if (latency > slowMs) slow.push(i)
  }
  const sorted = Float64Array.from(latencies).sort()
  const logs = new Map<string, Log>()
  for (const file of readdirSync(dir)) {
    if (file.startsWith(`${run}.`) && file.endsWith('.jsonl')) {
      logs.set(file.slice(run.length + 1, -'.jsonl'.length), readLog(join(dir, file)))
    }
  }
  const cpuNote = join(dir, `${run}.cpu.txt`)
  console.log(
    `\n#### ${run}: p50 ${percentile(sorted, 50).toFixed(3)} p99 ${percentile(sorted, 99).toFixed(3)} max ${percentile(sorted, 100).toFixed(1)} ms; ${slow.length} of ${latencies.length} answers over ${slowMs} ms`,
  )
  if (existsSync(cpuNote)) console.log(`  ${readFileSync(cpuNote, 'utf8')}`)
  for (const [name, log] of logs) {
    const stalled = log.stalls.filter((s) => s.stall + s.gap >= origin)
    const gcMs = log.gcs.filter((g) => g.gc >= origin).map((g) => g.ms)
    const workerGcs = log.threadGcs.filter((g) => g.gc >= origin)
    const byThread = new Map<string, number[]>()
    for (const g of workerGcs)
      byThread.set(g.thread as string, [...(byThread.get(g.thread as string) ?? []), g.ms])
    const workers = [...byThread]
      .map(
        ([thread, ms]) =>
          `; ${thread} GCs ${ms.length}, ${sum(ms)} ms, longest ${Math.max(...ms).toFixed(2)}`,
      )
      .join('')
    const threads = threadsIn(stalled)
    console.log(
      `  ${name}: ${stalled.length} loop gaps > 2 ms (sum ${sum(stalled.map((s) => s.gap))} ms: ran ${sum(stalled.map((s) => s.run))}, waited for a CPU ${sum(stalled.map((s) => s.wait))}${threads ? `; other threads around them: ${threads}` : ''}); ${gcMs.length} GCs, ${sum(gcMs)} ms, longest ${Math.max(0, ...gcMs).toFixed(2)}${workers}`,
    )
  }
  // Episodes: slow answers due within 5 ms of the previous one.
  const episodes: number[][] = []
  for (const i of slow) {
    const last = episodes.at(-1)
    const prev = last?.at(-1)
    if (last && prev !== undefined && (trace[i * 5] as number) - (trace[prev * 5] as number) < 5) {
      last.push(i)
    } else episodes.push([i])
  }
  const byCause = new Map<string, number>()
  for (const episode of episodes) {
    const from = trace[(episode[0] as number) * 5] as number
    const to = Math.max(...episode.map((i) => trace[i * 5 + 3] as number))
    const worst = Math.max(
      ...episode.map((i) => (trace[i * 5 + 3] as number) - (trace[i * 5] as number)),
    )
    // The label comes from the episode's onset (its first slow answer, from 5 ms before it was
    // due to its answer): a backlog that follows has every kind of event in it.
    const head = episode[0] as number
    const onsetTo = trace[head * 5 + 3] as number
    const late = (trace[head * 5 + 1] as number) - from
    const onsetLatency = onsetTo - from
    const seen: string[] = []
    const longestOnCpu0: Stall[] = []
    let pathGcMs = 0
    for (const [name, log] of logs) {
      const within = (at: number, length: number, until: number) =>
        at + length >= from - 5 && at <= until
      const gaps = log.stalls.filter((s) => within(s.stall, s.gap, to))
      const gcMs = log.gcs.filter((g) => within(g.gc, g.ms, to)).map((g) => g.ms)
      const longest = gaps.reduce((m, s) => (s.gap > m.gap ? s : m), { gap: 0, run: 0, wait: 0 })
      if (name !== 'generator') {
        const onset = log.stalls.filter((s) => within(s.stall, s.gap, onsetTo))
        const first = onset.reduce<Stall | undefined>(
          (m, s) => (m && m.gap >= s.gap ? m : s),
          undefined,
        )
        if (first) longestOnCpu0.push(first)
        pathGcMs += sumOf(log.gcs.filter((g) => within(g.gc, g.ms, onsetTo)).map((g) => g.ms))
      }
      if (gaps.length === 0 && !gcMs.some((d) => d >= 0.5)) continue
      const others = threadsIn(gaps)
      seen.push(
        `${name} ${gaps.length} gaps, sum ${sum(gaps.map((s) => s.gap))} (ran ${sum(gaps.map((s) => s.run))}, waited ${sum(gaps.map((s) => s.wait))}), longest ${longest.gap.toFixed(1)} (waited ${longest.wait.toFixed(1)}); GC ${sum(gcMs)} ms in ${gcMs.length}${others ? `; other threads ${others}` : ''}`,
      )
    }
    const cause = causeOf(late / onsetLatency, longestOnCpu0, pathGcMs)
    byCause.set(cause, (byCause.get(cause) ?? 0) + episode.length)
    console.log(
      `  @${at(from)}..${at(to)}: ${episode.length} slow, worst ${worst.toFixed(1)} ms, onset ${onsetLatency.toFixed(1)} ms (generator late ${late.toFixed(1)}) [${cause}]: ${seen.join('; ') || 'nothing logged'}`,
    )
  }
  const causes = [...byCause].map(([cause, n]) => `${cause} ${n}`).join(', ')
  console.log(`  slow answers by episode cause: ${causes || 'none'}`)
}

/**
 * A rough label for an episode, from what overlapped its onset:
 * - `generator`: the generator took the first slow request up late by half its latency or more
 *   (its CPU 1 or its own loop): its own lateness explains the onset;
 * - `CPU 0 held`: two or more of the path's Node processes were stalled at the same moment
 *   and each spent ≥ 70 % of its longest gap waiting for a CPU: none of them ran, so CPU 0 ran
 *   something else (another engineer's process, or nginx in an nginx row: nginx has no probe);
 * - `GC`: ≥ 1 ms of collection in the path's processes;
 * - `path busy`: otherwise, with loop gaps (our own work queued on the one core);
 * - `unlogged`: no gap over 2 ms and no GC anywhere (queueing under 2 ms per process).
 */
export function causeOf(lateShare: number, longest: Stall[], gcMs: number): string {
  if (lateShare >= 0.5) return 'generator'
  const waiting = longest.filter((s) => s.wait >= 0.7 * s.gap)
  const together =
    waiting.length >= 2 &&
    Math.max(...waiting.map((s) => s.stall)) < Math.min(...waiting.map((s) => s.stall + s.gap))
  if (together) return 'CPU 0 held'
  if (gcMs >= 1) return 'GC'
  return longest.length > 0 ? 'path busy' : 'unlogged'
}

/** CPU ms of a process's other threads around `gaps`, by thread name (≥ 1 ms). */
function threadsIn(gaps: readonly Stall[]): string {
  const threads: Record<string, number> = {}
  for (const gap of gaps) {
    for (const [thread, ms] of Object.entries(gap.threads ?? {})) {
      threads[thread] = (threads[thread] ?? 0) + ms
    }
  }
  return Object.entries(threads)
    .filter(([, ms]) => ms >= 1)
    .sort((a, b) => b[1] - a[1])
    .map(([thread, ms]) => `${thread} ${ms.toFixed(1)}`)
    .join(', ')
}

const sumOf = (values: number[]) => values.reduce((a, b) => a + b, 0)
const sum = (values: number[]) => sumOf(values).toFixed(1)

async function main(): Promise<void> {
  const { values } = readCli({
    script: 'bench/latency-stalls.ts',
    options: {
      rows: { type: 'regex' },
      rounds: { type: 'number', integer: true, default: 2 },
      rate: { type: 'number', value: 'R', default: 3000 },
      duration: { type: 'number', value: 'S', default: 6 },
      warmup: { type: 'number', zero: true, value: 'S', default: 1 },
      slow: { type: 'number', value: 'MS', default: 2 },
      dir: { type: 'string', value: 'DIR' },
      report: { type: 'string', value: 'DIR' },
      settle: { type: 'number', zero: true, value: 'S', default: 10 },
    },
  })
  const slowMs = values.slow
  const warmup = values.warmup
  if (values.report) {
    const runs = readdirSync(values.report).filter((f) => f.endsWith('.trace'))
    for (const file of runs.sort()) report(values.report, file.slice(0, -6), slowMs, warmup)
    return
  }
  const dir = values.dir ?? mkdtempSync(join(tmpdir(), 'tg-stalls-'))
  mkdirSync(dir, { recursive: true })
  const rows = ROWS.filter((id) => !values.rows || values.rows.test(id)).filter(
    (id) => !missingFor(id),
  )
  const fixtures = loadFixtures(join(tmpdir(), 'tokengate-latency-fixtures'))
  const env = Object.fromEntries(PROBED.map((id) => [id, probeEnv(join(dir, `${slug(id)}.log`))]))
  const servers = new LatencyServers(fixtures, env)
  const headers = bearer(fixtures.patSingle)
  const path = '/api/v1/projects/p1'
  const rate = values.rate
  console.log(`load average at the start: ${loadavg()[0]?.toFixed(2)}`)
  try {
    for (const id of rows) {
      const { url } = await servers.get(id)
      const prime = join(dir, 'prime')
      const slice = () =>
        generate(url, path, headers, { rate, duration: 2, warmup: 0, trace: prime, log: prime })
      const { slices } = await primeUntilQuiet(slice, () => servers.pids(), 2)
      console.log(`primed ${id}: ${slices} × 2 s`)
    }
    for (let round = 1; round <= values.rounds; round++) {
      for (const id of round % 2 ? rows : [...rows].reverse()) {
        const { url } = await servers.get(id)
        const run = `r${round}-${slug(id)}`
        // As latency.bench.ts: the previous run's post-load GCs end before this one. The
        // probe's 1 ms timer keeps a probed process near 1 % of a core: quiet is under 5 %.
        const quietSec = values.settle
        if (quietSec > 0) {
          const s = await settle(() => servers.pids(), quietSec, 20, 5)
          console.log(
            `settled before ${run}: ${s.waitedSec.toFixed(1)} s${s.quiet ? '' : ' (not quiet)'}`,
          )
        }
        const marks = new Map(PROBED.map((p) => [p, sizeOf(join(dir, `${slug(p)}.log`))]))
        const [cpu0, cpu1] = [markCpu(SERVER_CPU), markCpu(LOAD_CPU)]
        await generate(url, path, headers, {
          rate,
          duration: values.duration,
          warmup,
          trace: join(dir, `${run}.trace`),
          log: join(dir, `${run}.generator.jsonl`),
        })
        // Each server's log lines written during this run, beside the run's trace.
        for (const [p, mark] of marks) sliceLog(join(dir, `${slug(p)}.log`), mark, dir, run, p)
        const [server, load] = [shareSince(cpu0), shareSince(cpu1)]
        const pct = (value: number) => `${Math.round(value)} %`
        const note = `CPU ${SERVER_CPU} busy ${pct(server.busy)} (the path's processes ${pct(server.ours)}, others ${pct(server.others)}${namedOthers(server) ? `: ${namedOthers(server)}` : ''}; softirq ${pct(server.softirq)}), steal ${pct(server.steal)}; CPU ${LOAD_CPU} busy ${pct(load.busy)} (the generator's and others'), steal ${pct(load.steal)}; load average ${loadavg()[0]?.toFixed(2)}`
        writeFileSync(join(dir, `${run}.cpu.txt`), note)
        report(dir, run, slowMs, warmup)
      }
    }
  } finally {
    await servers.stopAll()
    console.log(
      `load average at the end: ${loadavg()[0]?.toFixed(2)}${values.dir ? `; logs in ${dir}` : ''}`,
    )
    if (!values.dir) rmSync(dir, { recursive: true, force: true })
  }
}

function sizeOf(file: string): number {
  return existsSync(file) ? readFileSync(file).length : 0
}

function sliceLog(file: string, from: number, dir: string, run: string, name: string): void {
  if (!existsSync(file)) return
  const part = readFileSync(file).subarray(from)
  if (part.length > 0) {
    writeFileSync(join(dir, `${run}.${slug(name)}.jsonl`), part)
  }
}

if (import.meta.main) await main()
