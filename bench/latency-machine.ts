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
  /** Per CPU: busy and steal jiffies (/proc/stat). */
  readonly cpus: readonly (readonly [number, number])[]
  /** Jiffies used so far by this process's descendants pinned to exactly `cpu`. */
  readonly ours: number
  readonly cpu: number
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
}

const PROC = existsSync('/proc/stat')

/** A reading of `cpu` now, to hand to `shareSince` after the run. */
export function markCpu(cpu: number): CpuMark {
  return { at: Date.now(), cpus: PROC ? cpuTimes() : [], ours: PROC ? ourCpu(cpu) : 0, cpu }
}

/** `mark.cpu`'s use since `mark`, split into the bench's pinned processes and the rest. */
export function shareSince(mark: CpuMark): CpuShare {
  if (!PROC) return { busy: Number.NaN, ours: Number.NaN, others: Number.NaN, steal: Number.NaN }
  const seconds = (Date.now() - mark.at) / 1000
  const now = cpuTimes()
  const pct = (jiffies: number) => jiffies / seconds // USER_HZ 100: jiffies per second = %
  const busy = pct((now[mark.cpu]?.[0] ?? 0) - (mark.cpus[mark.cpu]?.[0] ?? 0))
  const ours = pct(ourCpu(mark.cpu) - mark.ours)
  const steal = pct((now[mark.cpu]?.[1] ?? 0) - (mark.cpus[mark.cpu]?.[1] ?? 0))
  return { busy, ours, others: Math.max(0, busy - ours), steal }
}

/** Per CPU [busy, steal] jiffies from /proc/stat. */
function cpuTimes(): [number, number][] {
  const times: [number, number][] = []
  for (const line of readFileSync('/proc/stat', 'utf8').split('\n')) {
    const m = /^cpu(\d+) (.*)$/.exec(line)
    if (!m) continue
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = (m[2] as string)
      .split(' ')
      .map(Number)
    times[Number(m[1])] = [user + nice + system + irq + softirq, steal]
  }
  return times
}

/**
 * Jiffies used by the live descendants of this process whose CPU list is exactly `cpu` (a
 * process that exited during the interval drops out: the generator runs on the other CPU).
 */
function ourCpu(cpu: number): number {
  const parent = new Map<number, number>()
  const used = new Map<number, number>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      parent.set(Number(entry), Number(fields[1]))
      used.set(Number(entry), Number(fields[11]) + Number(fields[12]))
    } catch {} // gone since readdir
  }
  let total = 0
  for (const [pid, jiffies] of used) {
    if (!descends(pid, parent)) continue
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8')
      if (/^Cpus_allowed_list:\s*(\S+)$/m.exec(status)?.[1] === String(cpu)) total += jiffies
    } catch {}
  }
  return total
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
        if (readFileSync(`${task}/comm`, 'latin1').trim() !== 'V8Worker') continue
        ms += Number(readFileSync(`${task}/schedstat`, 'latin1').split(' ')[0]) / 1e6
      } catch {}
    }
  }
  return ms
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
