/**
 * What else ran on the servers' CPU during a latency run. On a shared machine the p99 of a run
 * is often another engineer's process holding CPU 0 (bench/README.md, issue #36 fourth
 * session): this tells such a run from one where the bench's own processes were the load.
 * Linux only (/proc); elsewhere every share is NaN.
 *
 * CPU time in USER_HZ jiffies (10 ms): over a 7 s run the shares are good to ~0.3 %.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'

export interface CpuMark {
  readonly at: number
  /** Per CPU: busy, steal and irq + softirq jiffies (/proc/stat). */
  readonly cpus: readonly (readonly [number, number, number])[]
  /** Jiffies used so far by this process's descendants pinned to exactly `cpu`. */
  readonly ours: number
  /** Jiffies used so far by each other process allowed on `cpu`, by pid. */
  readonly rest: ReadonlyMap<number, Use>
  readonly cpu: number
}

interface Use {
  readonly name: string
  readonly jiffies: number
  /** Allowed on `cpu` only (kernel per-CPU threads, another bench's pinned servers). */
  readonly pinned: boolean
}

/** Another process that used the CPU during the interval. */
export interface OtherProcess {
  readonly name: string
  readonly pid: number
  /** Percent of one CPU; for a process allowed on other CPUs too, an upper bound on `cpu`. */
  readonly percent: number
  readonly pinned: boolean
}

export interface CpuShare {
  /** Percent of one CPU over the interval. */
  readonly busy: number
  /** Of it, this process's descendants pinned to that CPU (the bench's servers). */
  readonly ours: number
  /** Of it, everything else: other engineers' processes, the kernel's work for them. */
  readonly others: number
  /** Time the hypervisor ran another guest while this CPU wanted to run. */
  readonly steal: number
  /**
   * Ticks that found the CPU in an interrupt or softirq (loopback packets are delivered in
   * softirq), whoever's: part of `busy`, and without CONFIG_IRQ_TIME_ACCOUNTING inside the
   * interrupted process's own time too, so also inside `ours` when it was ours.
   */
  readonly softirq: number
  /** The other processes allowed on the CPU that used the most CPU, most first (≤ `top`). */
  readonly busiest: readonly OtherProcess[]
}

const PROC = existsSync('/proc/stat')

/** A reading of `cpu` now, to hand to `shareSince` after the run. */
export function markCpu(cpu: number): CpuMark {
  const { ours, rest } = PROC ? scan(cpu) : { ours: 0, rest: new Map() }
  return { at: Date.now(), cpus: PROC ? cpuTimes() : [], ours, rest, cpu }
}

/**
 * `mark.cpu`'s use since `mark`, split into the bench's pinned processes and the rest, with
 * the `top` other processes that used the most.
 */
export function shareSince(mark: CpuMark, top = 4): CpuShare {
  if (!PROC) {
    const none = Number.NaN
    return { busy: none, ours: none, others: none, steal: none, softirq: none, busiest: [] }
  }
  const seconds = (Date.now() - mark.at) / 1000
  const now = cpuTimes()
  const { ours: oursNow, rest } = scan(mark.cpu)
  const pct = (jiffies: number) => jiffies / seconds // USER_HZ 100: jiffies per second = %
  const field = (i: 0 | 1 | 2) => pct((now[mark.cpu]?.[i] ?? 0) - (mark.cpus[mark.cpu]?.[i] ?? 0))
  const busy = field(0)
  const ours = pct(oursNow - mark.ours)
  const busiest: OtherProcess[] = []
  for (const [pid, use] of rest) {
    const used = use.jiffies - (mark.rest.get(pid)?.jiffies ?? 0)
    if (used > 0) busiest.push({ name: use.name, pid, percent: pct(used), pinned: use.pinned })
  }
  busiest.sort((a, b) => b.percent - a.percent)
  return {
    busy,
    ours,
    others: Math.max(0, busy - ours),
    steal: field(1),
    softirq: field(2),
    busiest: busiest.slice(0, top),
  }
}

/** `busiest` as `name pid %` (`*`: may have run on the other CPUs too), for a table cell. */
export function namedOthers(share: CpuShare, atLeast = 1): string {
  return share.busiest
    .filter((p) => p.percent >= atLeast)
    .map((p) => `${p.name} ${p.pid} ${Math.round(p.percent)}${p.pinned ? '' : '*'}`)
    .join(', ')
}

/** Per CPU [busy, steal, irq + softirq] jiffies from /proc/stat. */
function cpuTimes(): [number, number, number][] {
  const times: [number, number, number][] = []
  for (const line of readFileSync('/proc/stat', 'utf8').split('\n')) {
    const m = /^cpu(\d+) (.*)$/.exec(line)
    if (!m) continue
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = (m[2] as string)
      .split(' ')
      .map(Number)
    times[Number(m[1])] = [user + nice + system + irq + softirq, steal, irq + softirq]
  }
  return times
}

/**
 * `ours`: jiffies used by the live descendants of this process whose CPU list is exactly
 * `cpu` (a process that exited during the interval drops out: the generator runs on the other
 * CPU). `rest`: every other live process allowed on `cpu`, by pid.
 */
function scan(cpu: number): { ours: number; rest: Map<number, Use> } {
  const parent = new Map<number, number>()
  const used = new Map<number, { name: string; jiffies: number }>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      parent.set(Number(entry), Number(fields[1]))
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))
      used.set(Number(entry), { name, jiffies: Number(fields[11]) + Number(fields[12]) })
    } catch {} // gone since readdir
  }
  let ours = 0
  const rest = new Map<number, Use>()
  for (const [pid, { name, jiffies }] of used) {
    let cpus: Set<number>
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8')
      cpus = cpuList(/^Cpus_allowed_list:\s*(\S+)$/m.exec(status)?.[1] ?? '')
    } catch {
      continue
    }
    if (!cpus.has(cpu)) continue
    const pinned = cpus.size === 1
    if (pinned && descends(pid, parent)) ours += jiffies
    else rest.set(pid, { name, jiffies, pinned })
  }
  return { ours, rest }
}

/** `0-2,5` → {0, 1, 2, 5}. */
export function cpuList(text: string): Set<number> {
  const cpus = new Set<number>()
  for (const part of text.split(',')) {
    if (part === '') continue
    const [from = Number.NaN, to = from] = part.split('-').map(Number)
    if (Number.isNaN(from) || Number.isNaN(to)) continue
    for (let c = from; c <= to; c++) cpus.add(c)
  }
  return cpus
}

function descends(pid: number, parent: Map<number, number>): boolean {
  for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) {
    if (p === process.pid) return true
  }
  return false
}

/**
 * CPU ms V8's helper threads (named `V8Worker`: concurrent compilation, GC helpers) of these
 * processes have used so far; 0 for a process without them (nginx) or one gone. While a
 * server's optimizing compiler is still busy those threads take CPU 0 from its event loop
 * (issue #36, fourth session: 500 ms of it in a 7 s round 1, 22 ms in round 2).
 */
export function v8HelperCpuMs(pids: readonly number[]): number {
  return threadsCpuMs(pids, 'V8Worker')
}

/**
 * Runs `slice` (traffic for `sliceSec` seconds) until V8's helper threads of `pids()` used
 * under 2 % of a core in the last one, at most `maxSlices` times: a first round run while a
 * server's optimizing compiler still works has it take CPU 0 from the event loop. Resolves
 * with the slices run and the helpers' CPU ms in the last.
 */
export async function primeUntilQuiet(
  slice: () => Promise<unknown>,
  pids: () => Promise<number[]>,
  sliceSec: number,
  maxSlices = 8,
): Promise<{ slices: number; helperMs: number }> {
  let slices = 0
  let helperMs = 0
  do {
    const before = v8HelperCpuMs(await pids())
    await slice()
    helperMs = v8HelperCpuMs(await pids()) - before
    slices++
  } while (slices < maxSlices && helperMs > 0.02 * sliceSec * 1000)
  return { slices, helperMs }
}

/** CPU ms all threads of these processes have used so far (gone processes count 0). */
export function processCpuMs(pids: readonly number[]): number {
  return threadsCpuMs(pids)
}

/** CPU ms the threads of these processes (those named `name` only, when given) have used so far. */
function threadsCpuMs(pids: readonly number[], name?: string): number {
  let ms = 0
  for (const pid of pids) {
    let tids: string[] = []
    try {
      tids = readdirSync(`/proc/${pid}/task`)
    } catch {
      continue
    }
    for (const tid of tids) {
      try {
        const task = `/proc/${pid}/task/${tid}`
        if (name !== undefined && readFileSync(`${task}/comm`, 'latin1').trim() !== name) continue
        ms += Number(readFileSync(`${task}/schedstat`, 'latin1').split(' ')[0]) / 1e6
      } catch {}
    }
  }
  return ms
}

/**
 * Waits until the servers (`pids()`) used under `idlePercent` of a core for `quietSec` seconds
 * in a row, at most `maxSec`. A Node server whose load just ended runs V8's memory-reducer GCs
 * (incremental marking and a mark-compact, ~8 s after its last GC, two of them 0.5 s apart)
 * on CPU 0: without the wait they land in the next run's measured window, another row's
 * (issue #36, fifth session). Resolves with the seconds waited and whether they went quiet.
 */
export async function settle(
  pids: () => Promise<number[]>,
  quietSec: number,
  maxSec: number,
  idlePercent = 1,
  stepMs = 250,
): Promise<{ waitedSec: number; quiet: boolean }> {
  const start = Date.now()
  let quietSince = start
  let last = processCpuMs(await pids())
  while ((Date.now() - quietSince) / 1000 < quietSec) {
    if ((Date.now() - start) / 1000 >= maxSec) {
      return { waitedSec: (Date.now() - start) / 1000, quiet: false }
    }
    await new Promise((resolve) => setTimeout(resolve, stepMs))
    const now = processCpuMs(await pids())
    if (now - last > (idlePercent / 100) * stepMs) quietSince = Date.now()
    last = now
  }
  return { waitedSec: (Date.now() - start) / 1000, quiet: true }
}
