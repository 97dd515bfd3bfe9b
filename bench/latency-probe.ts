/**
 * Bench-only stall logger, preloaded into a bench process with
 * `--import ./bench/latency-probe.ts` and `TG_STALL_LOG=<file>` (nothing happens without it):
 * a 1 ms timer notes every event-loop gap longer than `TG_STALL_MS` (2) and, for the gap, how
 * much of it the main thread ran (its CPU), waited for a CPU (the kernel's run-queue delay,
 * /proc/thread-self/schedstat), the whole process ran (all threads), and which of its other
 * threads ran, by name (V8's GC and compiler helpers, the SQLite writer, libuv's pool; CPU ms
 * from 20 ms samples of /proc/self/task/<tid>/schedstat, so that window may start up to 20 ms
 * before the gap); every GC is logged too. Times are CLOCK_MONOTONIC ms (process.hrtime), the same
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
  const out = openSync(file, 'a')
  const line = (record: object) => writeSync(out, `${JSON.stringify(record)}\n`)

  const sched = openSync('/proc/thread-self/schedstat', 'r')
  const buf = Buffer.alloc(128)
  /** [ran ns, waited ns] of the main thread so far. */
  const readSched = (): [number, number] => {
    const n = readSync(sched, buf, 0, buf.length, 0)
    const [ran, waited] = buf.toString('latin1', 0, n).split(' ')
    return [Number(ran), Number(waited)]
  }
  const procCpu = () => {
    const { user, system } = process.cpuUsage()
    return (user + system) / 1000
  }

  // The process's other threads (V8's GC and compiler helpers, the SQLite writer, libuv's
  // pool), read every 20 ms: a gap's log names those that ran during it, by thread name.
  const mainTid = readlinkSync('/proc/thread-self').split('/').pop()
  const names = new Map<string, string>()
  type Snapshot = { readonly at: number; readonly cpu: Map<string, number> }
  const snapshot = (): Snapshot => {
    const cpu = new Map<string, number>()
    for (const tid of readdirSync('/proc/self/task')) {
      if (tid === mainTid) continue
      try {
        const task = `/proc/self/task/${tid}`
        cpu.set(tid, Number(readFileSync(`${task}/schedstat`, 'latin1').split(' ')[0]))
        if (!names.has(tid)) names.set(tid, readFileSync(`${task}/comm`, 'latin1').trim())
      } catch {} // the thread ended
    }
    return { at: clock(), cpu }
  }
  let snapshots = [snapshot()]
  const sampler = setInterval(() => {
    snapshots = [...snapshots.slice(-3), snapshot()]
  }, 20)
  sampler.unref()
  /** CPU ms of the other threads since the last snapshot taken by `since`, by thread name. */
  const othersSince = (since: number): Record<string, number> => {
    const base = snapshots.findLast((s) => s.at <= since) ?? snapshots[0]
    const now = snapshot()
    const used: Record<string, number> = {}
    for (const [tid, ns] of now.cpu) {
      const ms = (ns - (base?.cpu.get(tid) ?? ns)) / 1e6
      const name = names.get(tid) ?? tid
      if (ms > 0) used[name] = round((used[name] ?? 0) + ms)
    }
    for (const name of Object.keys(used)) if ((used[name] as number) < 0.2) delete used[name]
    return used
  }

  let last = clock()
  let [ran, waited] = readSched()
  let proc = procCpu()
  const timer = setInterval(() => {
    const t = clock()
    const [ranNow, waitedNow] = readSched()
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
    closeSync(out)
  })
}
