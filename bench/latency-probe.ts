/**
 * Bench-only stall logger, preloaded into a bench process with
 * `--import ./bench/latency-probe.ts` and `TG_STALL_LOG=<file>` (nothing happens without it):
 * a 1 ms timer notes every event-loop gap longer than `TG_STALL_MS` (2) and, for the gap, how
 * much of it the main thread ran (its CPU), waited for a CPU (the kernel's run-queue delay,
 * /proc/thread-self/schedstat), the whole process ran (all threads), and which of its other
 * threads ran, by name (V8's GC and compiler helpers, the SQLite writer, libuv's pool; CPU ms
 * from 20 ms samples of /proc/self/task/<tid>/schedstat, so that window may start up to 20 ms
 * before the gap; a thread that ended before the gap's end is not named: its counters are gone);
 * every GC is logged too. Times are CLOCK_MONOTONIC ms (process.hrtime), the same
 * clock in every process, so bench/latency-stalls.ts lines them up with the generator's slow
 * requests. Product code knows nothing of it.
 *
 * Lines (JSON): {"stall":at,"gap":ms,"run":ms,"wait":ms,"proc":ms,"threads":{name:ms}},
 * {"gc":at,"ms":d,"kind":k}, and a worker thread's GCs as {"gc":at,"ms":d,"kind":k,"thread":name}.
 */
import {
  closeSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  writeSync,
} from 'node:fs'
import { PerformanceObserver, performance } from 'node:perf_hooks'
import { isMainThread } from 'node:worker_threads'

const clock = () => Number(process.hrtime.bigint()) / 1e6
const round = (v: number) => Math.round(v * 1000) / 1000

// Workers inherit NODE_OPTIONS' --import: the event loop that serves is watched, a worker
// thread (the SQLite writer) logs only its GCs, with its thread's name.
const file = process.env.TG_STALL_LOG
if (file && isMainThread) start(file, Number(process.env.TG_STALL_MS ?? 2))
if (file && !isMainThread) {
  const out = openSync(file, 'a')
  const thread = readFileSync('/proc/thread-self/comm', 'latin1').trim()
  logGcs((record) => writeSync(out, `${JSON.stringify({ ...record, thread })}\n`))
}

/** Every GC of this thread's isolate, on CLOCK_MONOTONIC. */
function logGcs(line: (record: object) => void): void {
  // performance.now() is ms since this thread's timeOrigin; GC entries are on that timeline.
  const perfOffset = clock() - performance.now()
  const gcs = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as { detail?: { kind?: number } }).detail?.kind
      line({ gc: round(entry.startTime + perfOffset), ms: round(entry.duration), kind })
    }
  })
  gcs.observe({ entryTypes: ['gc'] })
}

function start(file: string, thresholdMs: number): void {
  // The same clock without a BigInt per reading (the 1 ms timer reads it every tick).
  const offset = clock() - performance.now()
  const now = () => performance.now() + offset
  const out = openSync(file, 'a')
  const line = (record: object) => writeSync(out, `${JSON.stringify(record)}\n`)

  // Sampling allocates nothing in steady state (numbers parsed from one reused buffer, rings
  // of preallocated arrays): an idle probed server made garbage enough for a mark-compact of
  // 2-26 ms every 1-2 s on CPU 0, inside the other rows' windows (issue #36, fifth session).
  const buf = Buffer.alloc(128)
  /** The first two numbers of a schedstat file: [ran ns, waited ns] so far. */
  const pair: [number, number] = [0, 0]
  const readPair = (fd: number): [number, number] => {
    const n = readSync(fd, buf, 0, buf.length, 0)
    let field = 0
    let value = 0
    for (let i = 0; i < n && field < 2; i++) {
      const c = buf[i] as number
      if (c >= 48 && c <= 57) value = value * 10 + (c - 48)
      else {
        pair[field++] = value
        value = 0
      }
    }
    return pair
  }
  const sched = openSync('/proc/thread-self/schedstat', 'r')
  const readSched = () => readPair(sched)
  const procCpu = () => {
    const { user, system } = process.cpuUsage()
    return (user + system) / 1000
  }

  // The process's other threads (V8's GC and compiler helpers, the SQLite writer, libuv's
  // pool), read every 20 ms into a ring of SLOTS snapshots: a gap's log names those that ran
  // during it, by thread name. The thread list is read again every second.
  const mainTid = readlinkSync('/proc/thread-self').split('/').pop()
  const SLOTS = 4
  const MAX_THREADS = 64
  let tids: string[] = []
  let names: string[] = []
  let fds: number[] = []
  const listThreads = () => {
    for (const fd of fds) closeSync(fd)
    ;[tids, names, fds] = [[], [], []]
    for (const tid of readdirSync('/proc/self/task')) {
      if (tid === mainTid || tids.length === MAX_THREADS) continue
      try {
        const task = `/proc/self/task/${tid}`
        const fd = openSync(`${task}/schedstat`, 'r')
        names.push(readFileSync(`${task}/comm`, 'latin1').trim())
        tids.push(tid)
        fds.push(fd)
      } catch {} // the thread ended
    }
    // A new list: the old snapshots' columns no longer match.
    filled = 0
  }
  const at = new Float64Array(SLOTS)
  const cpu = Array.from({ length: SLOTS }, () => new Float64Array(MAX_THREADS))
  let next = 0
  let filled = 0
  /** Reads every thread's CPU ns into `into` (NaN: the thread ended). */
  const readThreads = (into: Float64Array) => {
    for (let i = 0; i < fds.length; i++) {
      try {
        into[i] = readPair(fds[i] as number)[0]
      } catch {
        into[i] = Number.NaN
      }
    }
  }
  const snapshot = () => {
    at[next] = now()
    readThreads(cpu[next] as Float64Array)
    next = (next + 1) % SLOTS
    filled = Math.min(SLOTS, filled + 1)
  }
  listThreads()
  snapshot()
  // By the clock, not every 50th tick: on a loaded machine ticks come late, and a thread
  // started a second ago would still be missing from the gaps' logs.
  let listedAt = now()
  const sampler = setInterval(() => {
    if (now() - listedAt >= 1000) {
      listThreads()
      listedAt = now()
    }
    snapshot()
  }, 20)
  sampler.unref()
  const current = new Float64Array(MAX_THREADS)
  /** CPU ms of the other threads since the last snapshot taken by `since`, by thread name. */
  const othersSince = (since: number): Record<string, number> => {
    // The newest snapshot taken by `since`, else the oldest there is.
    let base = -1
    let oldest = -1
    for (let k = 1; k <= filled; k++) {
      const slot = (next - k + SLOTS) % SLOTS
      oldest = slot
      if (base < 0 && (at[slot] as number) <= since) base = slot
    }
    if (base < 0) base = oldest
    readThreads(current)
    const used: Record<string, number> = {}
    if (base < 0) return used
    const from = cpu[base] as Float64Array
    for (let i = 0; i < fds.length; i++) {
      const ms = ((current[i] as number) - (from[i] as number)) / 1e6
      const name = names[i] ?? (tids[i] as string)
      if (ms > 0) used[name] = round((used[name] ?? 0) + ms)
    }
    for (const name of Object.keys(used)) if ((used[name] as number) < 0.2) delete used[name]
    return used
  }

  let last = now()
  let ran = readSched()[0]
  let waited = pair[1]
  let proc = procCpu()
  const timer = setInterval(() => {
    const t = now()
    const ranNow = readSched()[0]
    const waitedNow = pair[1]
    const procNow = procCpu()
    if (t - last > thresholdMs) {
      line({
        stall: round(last),
        gap: round(t - last),
        run: round((ranNow - ran) / 1e6),
        wait: round((waitedNow - waited) / 1e6),
        proc: round(procNow - proc),
        threads: othersSince(last),
      })
    }
    last = t
    ran = ranNow
    waited = waitedNow
    proc = procNow
  }, 1)
  timer.unref()

  logGcs(line)
  process.once('exit', () => {
    closeSync(sched)
    for (const fd of fds) closeSync(fd)
    closeSync(out)
  })
}
