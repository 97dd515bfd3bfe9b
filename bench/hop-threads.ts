/**
 * CPU per request of a proxy hop and its upstream, thread by thread, at a paced rate (issue
 * #36): what sets the gateway's p99 at 3,000 req/s is how busy CPU 0 is, and at a paced rate
 * each request gets its own wake-ups and syscalls, so it costs more than at saturation.
 *
 * Every row (`--servers`: `gateway`, `gateway@<dir>` for another checkout's gateway, e.g.
 * `git archive <rev> | tar -x -C <dir>` with `node_modules` linked; `undici-proxy`) is a
 * proxy and its own upstream (bench/servers/peer.ts) on CPU 0, started once and kept; the
 * paced load generator runs on CPU 1. Each round loads every row in turn (rows interleaved,
 * the order rotated round by round)
 * and prints, per request answered, the CPU µs of the proxy's threads (`main`, V8 and libuv
 * helpers grouped by thread name) and of the upstream's, the path's share of CPU 0 (their CPU
 * over the load's seconds; others' processes pinned there come on top), and the latency p50/p99 from each request's due
 * time. `gateway@<dir>` runs with that checkout's production Node flags (its bench/load.ts).
 * Each row is loaded `--prime` s (default 3) before its measured window: the other
 * rows' turns leave it idle ~20 s, and a served process's first seconds after idle (its idle
 * collector ran) are not its steady state; `--prime 0` measures those instead. The last lines
 * are each row's median over the rounds.
 *
 * `--cpu-prof <dir>`: instead, the first of `--servers` under V8's CPU profiler (inspector,
 * 100 µs sampling) for one window at the rate: writes `<dir>/<server>.cpuprofile` (open it in
 * Chrome DevTools) and prints the functions by self time, µs per request. The samples are
 * wall time on the main thread: a write(2) to the upstream on the same core is charged with
 * the time the upstream, woken by it, runs before the proxy gets the core back.
 * `--heap-prof <dir>`: the same window under V8's sampling heap profiler: bytes allocated
 * per request by site (`<dir>/<server>.heapprofile`).
 *
 * Run: `node bench/hop-threads.ts [--rate 3000] [--duration 10] [--rounds 3] [--prime 3]
 * [--servers gateway,undici-proxy] [--baseline <dir>] [--cpu-prof <dir> [--top 30]]
 * [--heap-prof <dir> [--top 30]]`
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { readCli } from './cli.ts'
import { loadFixtures } from './fixtures.ts'
import { inspectPort } from './inspector-session.ts'
import { runLatency } from './latency-load.ts'
import { median } from './latency-stats.ts'
import { PRODUCTION_NODE_FLAGS } from './load.ts'
import { freePort, type Started, startNode, stop } from './processes.ts'

const { values } = readCli({
  script: 'bench/hop-threads.ts',
  options: {
    rate: { type: 'number', value: 'R', default: 3000 },
    duration: { type: 'number', value: 'S', default: 10 },
    warmup: { type: 'number', zero: true, value: 'S', default: 3 },
    prime: { type: 'number', zero: true, value: 'S', default: 3 },
    rounds: { type: 'number', integer: true, default: 3 },
    servers: { type: 'string', value: 'A,B', default: 'gateway,undici-proxy' },
    baseline: { type: 'string', value: 'DIR' },
    'cpu-prof': { type: 'string', value: 'DIR' },
    'heap-prof': { type: 'string', value: 'DIR' },
    top: { type: 'number', integer: true, default: 30 },
  },
})
const RATE = values.rate
const DURATION = values.duration
const WARMUP = values.warmup
const ROUNDS = values.rounds
const PRIME = values.prime
const SERVER_CPU = 0
const LOAD_CPU = 1
const fixtures = loadFixtures()
const PATH = '/api/v1/projects/p1'
const HEADERS = { authorization: `Bearer ${fixtures.patSingle}` }
/** A p50 above this: requests queued for the whole window (CPU 0 shared with others). */
const OVERLOADED_P50_MS = 50
/** Clock ticks per second of /proc's CPU times (USER_HZ, 100 on Linux). */
const TICK_MS = 10

interface Row {
  readonly name: string
  readonly proxy: Started
  readonly upstream: Started
  readonly url: string
  readonly results: Measured[]
}

interface Measured {
  /** CPU µs per request by thread name, proxy then upstream (`upstream ` prefixed). */
  readonly threads: Map<string, number>
  readonly proxyUs: number
  readonly upstreamUs: number
  /** Proxy + upstream CPU over the load's seconds: their share of CPU 0. */
  readonly pathShare: number
  readonly p50: number
  readonly p99: number
  readonly requests: number
}

/** CPU ms of each thread of `pid` so far, threads of one name (less a trailing number) summed. */
function threadCpu(pid: number): Map<string, number> {
  const out = new Map<string, number>()
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    let stat: string
    try {
      stat = readFileSync(`/proc/${pid}/task/${task}/stat`, 'utf8')
    } catch {
      continue // the thread ended
    }
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const ms = (Number(fields[11]) + Number(fields[12])) * TICK_MS
    const key = task === String(pid) ? 'main' : name.replace(/\d+$/, '#')
    out.set(key, (out.get(key) ?? 0) + ms)
  }
  return out
}

function proxyArgv(
  kind: string,
  port: number,
  upstream: string,
  flags: string[],
  production: readonly string[],
): string[] {
  if (kind === 'gateway') {
    return [
      ...production,
      ...flags,
      'bench/servers/tokengate.ts',
      fixtures.dir,
      `${port}`,
      upstream,
    ]
  }
  if (kind === 'undici-proxy')
    return [...flags, 'bench/servers/undici-proxy.ts', upstream, `${port}`]
  throw new Error(`unknown server ${kind}`)
}

async function startRow(name: string, flags: string[] = []): Promise<Row> {
  // `gateway@<dir>`: the same server from another checkout, run in its own directory.
  const [kind = name, checkout] = name.split('@')
  const [port, upstreamPort] = [await freePort(), await freePort()]
  const upstream = await startNode(SERVER_CPU, [
    'bench/servers/peer.ts',
    'upstream',
    'RS256',
    fixtures.dir,
    `${upstreamPort}`,
  ])
  // Another checkout's gateway runs with that checkout's production Node flags.
  const production =
    checkout === undefined
      ? PRODUCTION_NODE_FLAGS
      : (
          (await import(pathToFileURL(join(resolve(checkout), 'bench/load.ts')).href)) as {
            PRODUCTION_NODE_FLAGS: readonly string[]
          }
        ).PRODUCTION_NODE_FLAGS
  const argv = proxyArgv(kind, port, `http://127.0.0.1:${upstreamPort}`, flags, production)
  const proxy = await (checkout === undefined
    ? startNode(SERVER_CPU, argv)
    : inDirectory(checkout, () => startNode(SERVER_CPU, argv)))
  return { name, proxy, upstream, url: `http://127.0.0.1:${port}`, results: [] }
}

/** startNode spawns in the current directory: the other checkout's files resolve there. */
async function inDirectory<T>(dir: string, start: () => Promise<T>): Promise<T> {
  const here = process.cwd()
  process.chdir(dir)
  try {
    return await start()
  } finally {
    process.chdir(here)
  }
}

function load(url: string, durationSec: number) {
  return runLatency(
    'paced',
    { url, path: PATH, headers: HEADERS },
    { rate: RATE, durationSec, warmupSec: 0, connections: 32, cpu: LOAD_CPU },
  )
}

async function measure(row: Row): Promise<Measured> {
  const [proxyPid, upstreamPid] = [row.proxy.child.pid ?? 0, row.upstream.child.pid ?? 0]
  // The other rows' turns left this one idle: a served process's idle collector ran, and its
  // first seconds back under load are not its steady state (`--prime 0` measures them).
  if (PRIME > 0) await load(row.url, PRIME)
  const before = [threadCpu(proxyPid), threadCpu(upstreamPid)] as const
  const run = await load(row.url, DURATION)
  const after = [threadCpu(proxyPid), threadCpu(upstreamPid)] as const
  if (Object.keys(run.non2xx).length > 0) {
    throw new Error(`${row.name}: answers not 2xx ${JSON.stringify(run.non2xx)}`)
  }
  // The window's answers; the generator also waits up to 5 s for late ones, so the CPU
  // window holds all the work these requests caused (and a little idle time).
  const requests = run.summary.count
  const threads = new Map<string, number>()
  let proxyUs = 0
  let upstreamUs = 0
  for (const [i, prefix] of [
    [0, ''],
    [1, 'upstream '],
  ] as const) {
    for (const [name, ms] of after[i]) {
      const us = ((ms - (before[i].get(name) ?? 0)) * 1000) / requests
      if (us === 0) continue
      threads.set(prefix + name, us)
      if (i === 0) proxyUs += us
      else upstreamUs += us
    }
  }
  return {
    threads,
    proxyUs,
    upstreamUs,
    // The path's share of the core: its processes' CPU over the load's seconds. (/proc/stat's
    // CPU 0 line on this VM read below what our pinned processes alone used: not used.)
    pathShare: ((proxyUs + upstreamUs) * requests) / (DURATION * 1e6),
    p50: run.summary.p50Ms,
    p99: run.summary.p99Ms,
    requests,
  }
}

function line(name: string, m: Measured): string {
  const threads = [...m.threads]
    .filter(([, us]) => us >= 0.5)
    .map(([thread, us]) => `${thread} ${us.toFixed(1)}`)
    .join(', ')
  return [
    name.padEnd(16),
    `${m.proxyUs.toFixed(1)} + ${m.upstreamUs.toFixed(1)} CPU µs/req`.padStart(26),
    `path ${(m.pathShare * 100).toFixed(0)} % of CPU 0`.padStart(10),
    `p50 ${m.p50.toFixed(3)} p99 ${m.p99.toFixed(2)} ms`.padStart(24),
    `(${m.requests} req${m.p50 > OVERLOADED_P50_MS ? ', OVERLOADED: CPU 0 could not keep the rate, µs/req read as saturated' : ''}) ${threads}`,
  ].join(' ')
}

async function rows(): Promise<void> {
  const names = (values.servers ?? '').split(',').filter(Boolean)
  if (values.baseline) names.push(`gateway@${values.baseline}`)
  const started: Row[] = []
  try {
    for (const name of names) started.push(await startRow(name))
    for (const row of started) await load(row.url, WARMUP)
    for (let round = 0; round < ROUNDS; round++) {
      // Rotated each round: no row always runs first (after the longest idle) or last.
      for (let i = 0; i < started.length; i++) {
        const row = started[(i + round) % started.length] as Row
        const m = await measure(row)
        row.results.push(m)
        console.log(`r${round} ${line(row.name, m)}`)
      }
    }
    console.log(`median of ${ROUNDS} rounds at ${RATE} req/s, ${DURATION} s each:`)
    for (const row of started) {
      const r = row.results
      console.log(
        [
          row.name.padEnd(16),
          `${median(r.map((m) => m.proxyUs)).toFixed(1)} + ${median(r.map((m) => m.upstreamUs)).toFixed(1)} CPU µs/req`.padStart(
            26,
          ),
          `main ${median(r.map((m) => m.threads.get('main') ?? 0)).toFixed(1)}`,
          `upstream main ${median(r.map((m) => m.threads.get('upstream main') ?? 0)).toFixed(1)}`,
          `path ${(median(r.map((m) => m.pathShare)) * 100).toFixed(0)} % of CPU 0`,
          `p99 ${median(r.map((m) => m.p99)).toFixed(2)} ms`,
          `${r.filter((m) => m.p50 > OVERLOADED_P50_MS).length} of ${r.length} rounds overloaded`,
        ].join('  '),
      )
    }
  } finally {
    for (const row of started) {
      await stop(row.proxy.child)
      await stop(row.upstream.child)
    }
  }
}

interface ProfileNode {
  readonly id: number
  readonly callFrame: { functionName: string; url: string; lineNumber: number }
  readonly children?: readonly number[]
}

/** `--cpu-prof`: a proxy's functions by self time at the paced rate. */
async function cpuProfile(dir: string, name: string): Promise<void> {
  const port = await freePort()
  const row = await startRow(name, [`--inspect=127.0.0.1:${port}`])
  try {
    await load(row.url, WARMUP)
    const session = await inspectPort(port)
    await session.call('Profiler.enable', {})
    await session.call('Profiler.setSamplingInterval', { interval: 100 })
    await session.call('Profiler.start', {})
    const run = await load(row.url, DURATION)
    const { profile } = (await session.call('Profiler.stop', {})) as {
      profile: { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] }
    }
    session.close()
    mkdirSync(dir, { recursive: true })
    const file = join(dir, `${name.replace(/\W+/g, '-')}.cpuprofile`)
    writeFileSync(file, JSON.stringify(profile))
    const nodes = new Map(profile.nodes.map((n) => [n.id, n]))
    const selfUs = new Map<string, number>()
    profile.samples.forEach((id, i) => {
      const frame = nodes.get(id)?.callFrame
      if (!frame) return
      const file = frame.url.replace(/^.*\/(node_modules|src|bench)\//, '$1/')
      const site = `${frame.functionName || '(anonymous)'} ${file}:${frame.lineNumber + 1}`
      selfUs.set(site, (selfUs.get(site) ?? 0) + (profile.timeDeltas[i] ?? 0))
    })
    const requests = run.summary.count
    const busy = [...selfUs].filter(([site]) => !site.startsWith('(idle)'))
    const total = busy.reduce((sum, [, us]) => sum + us, 0)
    console.log(
      `${(total / requests).toFixed(1)} µs/req on the main thread sampled (idle left out) over ${requests} requests at ${RATE} req/s; profile in ${file}`,
    )
    for (const [site, us] of busy.sort((a, b) => b[1] - a[1]).slice(0, values.top)) {
      console.log(`${(us / requests).toFixed(2).padStart(8)} µs/req  ${site}`)
    }
  } finally {
    await stop(row.proxy.child)
    await stop(row.upstream.child)
  }
}

interface HeapNode {
  callFrame: ProfileNode['callFrame']
  selfSize: number
  children: HeapNode[]
}

/**
 * `--heap-prof`: a proxy's allocations by site at the paced rate (V8's sampling heap
 * profiler, every 512 bytes on average, objects a GC already freed included): bytes per
 * request, the young garbage each request leaves for the scavenger.
 */
async function heapProfile(dir: string, name: string): Promise<void> {
  const port = await freePort()
  const row = await startRow(name, [`--inspect=127.0.0.1:${port}`])
  try {
    await load(row.url, WARMUP)
    const session = await inspectPort(port)
    await session.call('HeapProfiler.enable', {})
    await session.call('HeapProfiler.startSampling', {
      samplingInterval: 512,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    })
    const run = await load(row.url, DURATION)
    const { profile } = (await session.call('HeapProfiler.stopSampling', {})) as {
      profile: { head: HeapNode }
    }
    session.close()
    mkdirSync(dir, { recursive: true })
    const file = join(dir, `${name.replace(/\W+/g, '-')}.heapprofile`)
    writeFileSync(file, JSON.stringify(profile))
    const bySite = new Map<string, number>()
    const visit = (node: HeapNode): void => {
      const frame = node.callFrame
      const file = frame.url.replace(/^.*\/(node_modules|src|bench)\//, '$1/')
      const site = `${frame.functionName || '(anonymous)'} ${file}:${frame.lineNumber + 1}`
      if (node.selfSize > 0) bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize)
      for (const child of node.children) visit(child)
    }
    visit(profile.head)
    const requests = run.summary.count
    const total = [...bySite.values()].reduce((sum, bytes) => sum + bytes, 0)
    console.log(
      `${(total / requests).toFixed(0)} B/req allocated (sampled) over ${requests} requests at ${RATE} req/s; profile in ${file}`,
    )
    for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, values.top)) {
      console.log(`${(bytes / requests).toFixed(0).padStart(8)} B/req  ${site}`)
    }
  } finally {
    await stop(row.proxy.child)
    await stop(row.upstream.child)
  }
}

const profiled = (values.servers ?? '').split(',')[0] || 'gateway'
if (values['cpu-prof']) await cpuProfile(values['cpu-prof'], profiled)
else if (values['heap-prof']) await heapProfile(values['heap-prof'], profiled)
else await rows()
