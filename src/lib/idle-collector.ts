/**
 * Gives memory back when a busy process goes idle. Why: after a burst (a cache filled, a
 * load test), V8 keeps the old generation's garbage and its emptied pages, and the typed
 * arrays a grown table replaced, until its next major GC, which an idle server does not
 * reach; its memory reducer did not start in 12 s of idle in the memory bench. Served with
 * 100,000 cached PATs that is ~60 MB of RSS (bench/README.md, "Memory"). A memory-reducing full
 * collection then costs one pause of tens of ms at a moment when the event loop has little
 * to do (a request arriving meanwhile waits for it).
 *
 * Each `intervalMs` the event loop's utilization over the interval is read (every 8 intervals
 * once 8 looks in a row found it idle with nothing to collect, until it is busy again); when it was below
 * `idleUtilization` and, since the last collection (or the start), the RSS has grown by
 * `minGrowthBytes` or the loop has been busy for `minBusyMs` in all, one collection runs. A
 * steadily busy process is never collected by this; a quiet one only after it grew or worked
 * again. Why the busy time too: a collection that fell early in a burst set the RSS baseline
 * high, and the garbage of the rest of the burst (21 MB of V8 heap in one memory bench run)
 * then stayed until RSS grew by another 16 MiB.
 *
 * A serving process counts growth from its peak instead (`growthFromPeak`, busy time off):
 * any full collection in an idle spell, reducing or not, clears the objects the optimized code
 * of the last load embedded, and V8 throws that code away ("embedded weak objects cleared");
 * the next seconds of load then run unoptimized while their functions are compiled again (the
 * after-idle p99 in bench/README.md). Collecting the RSS that the next load takes again costs
 * that each time; collecting when the process grew past anything it had reached (a cache
 * filled) does not recur.
 */
import { performance } from 'node:perf_hooks'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { getEnvironmentData, setEnvironmentData } from 'node:worker_threads'

export interface IdleCollectorOptions {
  /** How often the loop's utilization is read, ms. Default 500. */
  readonly intervalMs?: number
  /** "Idle": the event loop was busy less than this share of the interval. Default 0.05. */
  readonly idleUtilization?: number
  /** RSS growth since the last collection that makes one worth its pause. Default 16 MiB. */
  readonly minGrowthBytes?: number
  /** Event-loop busy time since the last collection that makes one worth it, ms. Default 5000. */
  readonly minBusyMs?: number
  /**
   * Growth counted from the highest RSS seen up to the last collection (the working set the
   * next load reaches again), not from what that collection left. Default false.
   */
  readonly growthFromPeak?: boolean
  /** The collection (`memoryReducingGc()`). */
  readonly collect: () => void
  /** Default `process.memoryUsage.rss`. */
  readonly rss?: () => number
  /** The loop's utilization since the last call; default from `performance.eventLoopUtilization`. */
  readonly utilization?: () => number
}

export interface IdleCollector {
  /** Collections run so far. */
  readonly collections: number
  /**
   * Looks so far that found the loop idle, collecting or not. Why: a caller waits for the
   * collector to have seen an idle spell by this, where a sleep of a few intervals can end
   * before a loaded machine ran the looks (test/lib/idle-code.test.ts).
   */
  readonly idleLooks: number
  stop(): void
}

export function startIdleCollector(options: IdleCollectorOptions): IdleCollector {
  const idleUtilization = options.idleUtilization ?? 0.05
  const minGrowthBytes = options.minGrowthBytes ?? 16 * 1024 * 1024
  const rss = options.rss ?? (() => process.memoryUsage.rss())
  const collect = options.collect
  const utilization = options.utilization ?? loopUtilization()
  const intervalMs = options.intervalMs ?? 500
  const minBusyMs = options.minBusyMs ?? 5000
  const growthFromPeak = options.growthFromPeak ?? false
  let baseline = rss()
  let peak = baseline
  let busyMs = 0
  let collections = 0
  let idleLooks = 0
  // Idle with nothing to collect for QUIET_LOOKS looks in a row: look every QUIET_FACTOR
  // intervals instead, until the loop is busy again (an idle process woke twice a second for
  // this alone, in each thread that runs one).
  let quietLooks = 0
  let everyMs = intervalMs
  const look = () => {
    const share = utilization()
    busyMs += share * everyMs
    const now = rss()
    if (now > peak) peak = now
    if (share >= idleUtilization) return pace(intervalMs)
    idleLooks++
    if (now - baseline < minGrowthBytes && busyMs < minBusyMs) {
      if (++quietLooks >= QUIET_LOOKS) pace(intervalMs * QUIET_FACTOR)
      return
    }
    collect()
    collections++
    baseline = growthFromPeak ? peak : rss()
    busyMs = 0
    pace(intervalMs)
  }
  const every = (ms: number) => {
    const timer = setInterval(look, ms)
    // Never what keeps a process alive.
    timer.unref()
    return timer
  }
  let timer = every(intervalMs)
  const pace = (ms: number) => {
    if (ms === intervalMs) quietLooks = 0
    if (ms === everyMs) return
    clearInterval(timer)
    everyMs = ms
    timer = every(ms)
  }
  return {
    get collections() {
      return collections
    },
    get idleLooks() {
      return idleLooks
    },
    stop: () => clearInterval(timer),
  }
}

/** Quiet looks in a row before the collector looks less often, and how much less. */
const QUIET_LOOKS = 8
const QUIET_FACTOR = 8

/** The event loop's utilization since the previous call (the first: since the start). */
function loopUtilization(): () => number {
  let last = performance.eventLoopUtilization()
  return () => {
    const now = performance.eventLoopUtilization()
    const share = performance.eventLoopUtilization(now, last).utilization
    last = now
    return share
  }
}

type ExposedGc = (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void

/**
 * A memory-reducing full collection (V8's "all available garbage": repeated full GCs with
 * compaction, emptied pages returned). A plain `gc()` frees the objects but keeps the pages:
 * RSS 151 -> 149 MB where this gives 151 -> 63 in a test holding 100 MB of garbage.
 *
 * Why the flag dance: V8's `gc` function exists only in contexts made while `--expose-gc` is
 * set. Setting it for the one context made here hands this module the function without
 * exposing a global `gc` to the rest of the process, and without a Node flag that every way
 * of starting (bin, container entrypoint, `npm start`, worker processes) would have to carry.
 * V8's flags are the process's, so the dance holds `gcFlagLock()` (threads dancing at once
 * turned the flag off under each other: serve's start failed with "gc is not defined").
 */
export function memoryReducingGc(): () => void {
  let gc = (globalThis as { gc?: ExposedGc }).gc
  if (typeof gc !== 'function') {
    const lock = GC_FLAG_LOCK
    while (Atomics.compareExchange(lock, 0, 0, 1) !== 0) Atomics.wait(lock, 0, 1, 10)
    try {
      setFlagsFromString('--expose-gc')
      gc = runInNewContext('gc') as ExposedGc
      setFlagsFromString('--no-expose-gc')
    } finally {
      Atomics.store(lock, 0, 0)
      Atomics.notify(lock, 0, 1)
    }
  }
  const collect = gc
  return () => collect({ type: 'major', execution: 'sync', flavor: 'last-resort' })
}

/**
 * The process's one lock around the `--expose-gc` dance, made when this module is first
 * loaded. Why the environment data: each new Worker gets a copy of it, and a
 * SharedArrayBuffer's copy is the same memory, so every thread started after this module
 * loaded shares the lock without it being passed by hand. A module starting such a Worker
 * imports `gcFlagLock` (sqlite-writer.ts) so that it is made first.
 */
export function gcFlagLock(): Int32Array {
  let shared = getEnvironmentData(GC_FLAG_LOCK_NAME)
  if (!(shared instanceof SharedArrayBuffer)) {
    shared = new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT)
    setEnvironmentData(GC_FLAG_LOCK_NAME, shared)
  }
  return new Int32Array(shared as SharedArrayBuffer)
}

const GC_FLAG_LOCK_NAME = 'tokengate:expose-gc-lock'
const GC_FLAG_LOCK = gcFlagLock()
