/**
 * What a proxied request allocates and what the collector then costs, in the arrangement a
 * small node or a sidecar gives users (issue #36): the proxy under test and its upstream on
 * CPU 0, the evenly paced load generator (bench/paced-load.ts) on CPU 1.
 *
 * For each round and each proxy (tokengate's production server in gateway mode, PAT, rate
 * limits on; and the bare undici proxy, `--servers` chooses): the proxy runs with its
 * production Node flags plus `--trace-gc-nvp`; after a warm-up load, `--rate` requests/s for
 * `--duration` s are sent and the GC lines printed in that window are summed:
 * - bytes allocated per request: the `allocated=` of every GC in the window (bytes allocated
 *   since the GC before) over the requests answered;
 * - GC pauses: scavenges and mark-compacts, their total and longest pause;
 * - the load's latency from each request's due time: p50, p99, max (ms).
 *
 * - CPU µs per request of the proxy and of the upstream (their sum is what a request costs the
 *   core): CPU time, unlike latency, stays readable on a shared machine.
 *
 * `gateway@<dir>` in `--servers`: the gateway of another checkout (`git archive <rev> | tar -x
 * -C <dir>`, `node_modules` linked), so two revisions alternate round by round at one rate.
 *
 * `--rate 0`: wrk's closed loop instead (32 connections, as fast as the proxy answers), for
 * bytes per request on a machine too busy to hold a rate; its latencies are not comparable.
 *
 * `--alloc-profile`: instead, one tokengate gateway under V8's sampling heap profiler (every
 * object sampled is kept, also those a GC collected) for the same load; prints the
 * allocating functions by bytes per request. Where to look, not a figure to quote: sampling
 * at 4 KB intervals.
 *
 * Run: `node bench/gateway-gc.bench.ts [--rate 3000] [--duration 6] [--rounds 3]
 * [--servers gateway,undici-proxy] [--node-flags '...'] [--alloc-profile [--depth 3] [--top 40]]`
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { readCli } from './cli.ts'
import { loadFixtures } from './fixtures.ts'
import { inspectPort as connectInspector } from './inspector-session.ts'
import { percentile } from './latency-stats.ts'
import { cpuMicros, PRODUCTION_NODE_FLAGS, runLoad } from './load.ts'
import { freePort, pinned, stop } from './processes.ts'

const { values } = readCli({
  script: 'bench/gateway-gc.bench.ts',
  options: {
    rate: { type: 'number', value: 'R', default: 3000 },
    duration: { type: 'number', value: 'S', default: 6 },
    warmup: { type: 'number', zero: true, value: 'S', default: 2 },
    rounds: { type: 'number', integer: true, default: 3 },
    servers: { type: 'string', value: 'A,B', default: 'gateway,undici-proxy' },
    'node-flags': { type: 'flags', default: '' },
    'alloc-profile': { type: 'boolean' },
    depth: { type: 'number', integer: true, default: 1 },
    top: { type: 'number', integer: true, default: 40 },
  },
})
const RATE = values.rate
const DURATION = values.duration
const WARMUP = values.warmup
const DEPTH = values.depth
const EXTRA_FLAGS = values['node-flags'].split(' ').filter(Boolean)
const fixtures = loadFixtures()
const PATH = '/api/v1/projects/p1'
const HEADERS = { authorization: `Bearer ${fixtures.patSingle}` }

const SERVERS: Record<string, (port: number, upstream: string) => string[]> = {
  gateway: (port, upstream) => [
    ...PRODUCTION_NODE_FLAGS,
    'bench/servers/tokengate.ts',
    fixtures.dir,
    `${port}`,
    upstream,
  ],
  'undici-proxy': (port, upstream) => ['bench/servers/undici-proxy.ts', upstream, `${port}`],
}

/** A process whose stdout lines are kept (READY, and the `--trace-gc-nvp` lines). */
interface Traced {
  readonly child: ChildProcess
  readonly lines: string[]
}

function startTraced(cpu: number, argv: string[], cwd?: string): Promise<Traced> {
  const [command, args] = pinned(cpu, process.execPath, argv)
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'], cwd })
  const lines: string[] = []
  let partial = ''
  child.stdout?.setEncoding('utf8')
  return new Promise((resolve, reject) => {
    child.stdout?.on('data', (chunk: string) => {
      const parts = (partial + chunk).split('\n')
      partial = parts.pop() ?? ''
      for (const line of parts) {
        lines.push(line)
        if (line.startsWith('READY')) resolve({ child, lines })
      }
    })
    child.once('exit', (code) => reject(new Error(`${argv.join(' ')} exited with ${code}`)))
  })
}

interface Window {
  readonly requests: number
  /** Requests not answered in time (an overloaded machine): not in `requests`. */
  readonly failed: number
  readonly p50: number
  readonly p99: number
  readonly max: number
}

/** The paced load on CPU 1 against `url`; its 2xx latencies summarised. */
async function load(url: string, durationSec: number): Promise<Window> {
  if (RATE === 0) {
    // Closed loop: wrk, 32 connections, as fast as the proxy answers (the rate when busy).
    const run = await runLoad(
      'wrk',
      { url, path: PATH, headers: HEADERS, durationSec, connections: 32 },
      1,
    )
    if (run.non2xx > 0) throw new Error(`${run.non2xx} answers not 2xx`)
    return { requests: run.requests, failed: 0, p50: run.p50Ms, p99: run.p99Ms, max: Number.NaN }
  }
  const dir = mkdtempSync(join(tmpdir(), 'tg-gcload-'))
  const out = join(dir, 'latencies.f64')
  const argv = [
    join(import.meta.dirname, 'paced-load.ts'),
    ...['--url', url, '--path', PATH, '--rate', String(RATE)],
    ...['--duration', String(durationSec), '--warmup', '0', '--connections', '32'],
    ...['--out', out],
    ...Object.entries(HEADERS).flatMap(([name, value]) => ['--header', `${name}: ${value}`]),
  ]
  const [command, args] = pinned(1, process.execPath, argv)
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] })
  let stdout = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk
  })
  const code = await new Promise((resolve) => child.once('exit', resolve))
  try {
    if (code !== 0) throw new Error(`paced-load exited with ${code}`)
    const result = JSON.parse(stdout) as {
      ok: number
      due: number
      failed: number
      non2xx: Record<string, number>
    }
    if (Object.keys(result.non2xx).length > 0) throw new Error(`answers not 2xx: ${stdout}`)
    const bytes = readFileSync(out)
    const latencies = new Float64Array(bytes.buffer, bytes.byteOffset, bytes.length / 8)
      .slice()
      .sort()
    return {
      requests: result.ok,
      failed: result.failed,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: latencies.at(-1) ?? 0,
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

interface GcSummary {
  readonly allocated: number
  readonly scavenges: number
  readonly markCompacts: number
  readonly pauseMs: number
  readonly maxPauseMs: number
}

/** Sums `--trace-gc-nvp` lines (`pause=… gc=s|mc|… allocated=…`). */
function summarizeGc(lines: readonly string[]): GcSummary {
  let allocated = 0
  let scavenges = 0
  let markCompacts = 0
  let pauseMs = 0
  let maxPauseMs = 0
  for (const line of lines) {
    const kind = / gc=(\S+)/.exec(line)?.[1]
    if (kind === undefined) continue
    const pause = Number(/ pause=([\d.]+)/.exec(line)?.[1] ?? 0)
    allocated += Number(/ allocated=(-?\d+)/.exec(line)?.[1] ?? 0)
    if (kind === 's' || kind === 'mmc') scavenges++
    else markCompacts++
    pauseMs += pause
    maxPauseMs = Math.max(maxPauseMs, pause)
  }
  return { allocated, scavenges, markCompacts, pauseMs, maxPauseMs }
}

/** The upstream both the measured servers and the allocation profile proxy to, on CPU 0. */
function startUpstream(port: number): Promise<Traced> {
  return startTraced(0, ['bench/servers/peer.ts', 'upstream', 'RS256', fixtures.dir, `${port}`])
}

async function measure(name: string): Promise<string> {
  // `gateway@<dir>`: the same server from another checkout, run in its own directory.
  const [kind = name, checkout] = name.split('@')
  const argvOf = SERVERS[kind]
  if (!argvOf) throw new Error(`unknown server ${name}`)
  const [port, upstreamPort] = [await freePort(), await freePort()]
  const upstream = await startUpstream(upstreamPort)
  const proxy = await startTraced(
    0,
    ['--trace-gc-nvp', ...EXTRA_FLAGS, ...argvOf(port, `http://127.0.0.1:${upstreamPort}`)],
    checkout,
  )
  try {
    const url = `http://127.0.0.1:${port}`
    await load(url, WARMUP)
    await sleep(200)
    const from = proxy.lines.length
    const cpuBefore = [cpuMicros(proxy.child.pid) ?? 0, cpuMicros(upstream.child.pid) ?? 0]
    const window = await load(url, DURATION)
    const cpuAfter = [cpuMicros(proxy.child.pid) ?? 0, cpuMicros(upstream.child.pid) ?? 0]
    await sleep(200)
    const gc = summarizeGc(proxy.lines.slice(from))
    const kb = gc.allocated / window.requests / 1024
    const [proxyCpu, upstreamCpu] = [0, 1].map(
      (i) => ((cpuAfter[i] ?? 0) - (cpuBefore[i] ?? 0)) / window.requests,
    )
    return [
      name.padEnd(13),
      `${Math.round(window.requests / DURATION)} req/s`.padStart(11),
      `${(proxyCpu ?? 0).toFixed(1)} + ${(upstreamCpu ?? 0).toFixed(1)} CPU µs/req`.padStart(24),
      `${kb.toFixed(1)} KB/req`.padStart(12),
      `${gc.scavenges} scav`.padStart(9),
      `${gc.markCompacts} mc`.padStart(6),
      `${gc.pauseMs.toFixed(0)} ms in GC`.padStart(12),
      `max ${gc.maxPauseMs.toFixed(1)} ms`.padStart(12),
      `p50 ${window.p50.toFixed(2)}`.padStart(10),
      `p99 ${window.p99.toFixed(2)}`.padStart(10),
      `max ${window.max.toFixed(1)} ms`.padStart(14),
      `(${window.requests} requests${window.failed ? `, ${window.failed} unanswered` : ''})`,
    ].join(' ')
  } finally {
    await stop(proxy.child)
    await stop(upstream.child)
  }
}

/** `--alloc-profile`: the gateway's allocating functions, bytes per request. */
async function allocationProfile(): Promise<void> {
  const [port, upstreamPort, inspectPort] = [await freePort(), await freePort(), await freePort()]
  const upstream = await startUpstream(upstreamPort)
  const proxy = await startTraced(0, [
    `--inspect=127.0.0.1:${inspectPort}`,
    ...EXTRA_FLAGS,
    ...(SERVERS.gateway?.(port, `http://127.0.0.1:${upstreamPort}`) ?? []),
  ])
  try {
    const url = `http://127.0.0.1:${port}`
    await load(url, WARMUP)
    const session = await connectInspector(inspectPort)
    await session.call('HeapProfiler.startSampling', {
      samplingInterval: 4096,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    })
    const window = await load(url, DURATION)
    const { profile } = (await session.call('HeapProfiler.stopSampling', {})) as {
      profile: { head: SamplingNode }
    }
    session.close()
    const bySite = new Map<string, number>()
    const name = (node: SamplingNode) => {
      const frame = node.callFrame
      const file = frame.url.replace(/^.*\/(node_modules|src|bench)\//, '$1/')
      return `${frame.functionName || '(anonymous)'} ${file}:${frame.lineNumber + 1}`
    }
    // A function's own allocations, with the caller chain (`--depth` frames) when asked.
    const walk = (node: SamplingNode, stack: readonly string[]) => {
      const here = [name(node), ...stack].slice(0, DEPTH)
      const site = here.join(' <- ')
      bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize)
      for (const child of node.children) walk(child, here)
    }
    walk(profile.head, [])
    const total = [...bySite.values()].reduce((a, b) => a + b, 0)
    console.log(
      `sampled ${(total / window.requests).toFixed(0)} bytes per request over ${window.requests} requests; by allocating function:`,
    )
    for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, values.top)) {
      console.log(`${(bytes / window.requests).toFixed(0).padStart(7)} B/req  ${site}`)
    }
  } finally {
    await stop(proxy.child)
    await stop(upstream.child)
  }
}

interface SamplingNode {
  readonly callFrame: { functionName: string; url: string; lineNumber: number }
  readonly selfSize: number
  readonly children: readonly SamplingNode[]
}

if (values['alloc-profile']) {
  await allocationProfile()
} else {
  console.log(
    `${RATE} req/s for ${DURATION} s, proxy and upstream on CPU 0, paced load on CPU 1; proxy flags: ${[...PRODUCTION_NODE_FLAGS, ...EXTRA_FLAGS].join(' ')} (gateway) / ${EXTRA_FLAGS.join(' ') || 'none'} (bare)`,
  )
  for (let round = 1; round <= values.rounds; round++) {
    for (const name of (values.servers ?? '').split(',')) {
      console.log(`round ${round} ${await measure(name)}`)
    }
  }
}
