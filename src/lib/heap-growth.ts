/**
 * How far V8 lets the old generation grow past what the last full collection kept, for a
 * serving process. Why: V8 picks a growing factor of up to 4x from its GC and mutator speeds,
 * and the request path's short-lived objects that outlive two scavenges (in flight across
 * them) land in the old space; the memory bench's served process (1,000,000 keys stored,
 * 100,000 cached, all hits) had 59 MB of old space committed, 58.7 used, for ~12 MB live
 * half-way through its load, and RSS 218-237 MB throughout the load. A fixed 1.5x starts
 * the next full collection at ~20 MB: old space 21.8 committed / 12.4 used, RSS 179 MB
 * (bench/README.md, issue #36 fourth session). The price is more full collections of a small
 * heap (mostly marked on a helper thread).
 *
 * Not set here (bench/README.md, issue #36 sixth session): `--no-maglev` (peak RSS ~12 MB
 * lower, but ~1.3x the CPU over a start's first 20,000 requests, and the memory target is met
 * without it), nor `--single-threaded-gc`: V8 applies what it implies only as it starts, so
 * set from here it left the GC helper threads working, and `--no-concurrent-marking` set
 * after start aborts V8.
 */
import { setFlagsFromString } from 'node:v8'

/** The growing factor's percent over 1: 50 = the next full GC at 1.5x the live old space. */
export const SERVED_HEAP_GROWING_PERCENT = 50

const FLAG = '--heap-growing-percent'

/** How the process was started: its Node flags and NODE_OPTIONS. */
export interface StartedWith {
  readonly execArgv: readonly string[]
  readonly nodeOptions: string | undefined
}

/**
 * The `--heap-growing-percent` flag a serving process should get, or undefined when it was
 * started with one (its command line or NODE_OPTIONS): an operator's own choice is kept.
 */
export function heapGrowthFlag(
  started: StartedWith,
  percent: number = SERVED_HEAP_GROWING_PERCENT,
): string | undefined {
  if (!Number.isSafeInteger(percent) || percent < 1) {
    throw new RangeError('heap growing percent must be an integer >= 1')
  }
  const chosen = [...started.execArgv, ...(started.nodeOptions ?? '').split(/\s+/)].some(
    (arg) => arg === FLAG || arg.startsWith(`${FLAG}=`) || arg.startsWith('--heap_growing_percent'),
  )
  return chosen ? undefined : `${FLAG}=${percent}`
}

/**
 * Sets V8's `--heap-growing-percent` for this process (every isolate: the flag is read at each
 * full collection), unless it was started with one. Returns the percent set, or undefined when
 * the operator's is in force. A worker pool's workers get it as a Node flag instead
 * (server/workers.ts).
 */
export function boundHeapGrowth(
  started: StartedWith,
  percent: number = SERVED_HEAP_GROWING_PERCENT,
): number | undefined {
  const flag = heapGrowthFlag(started, percent)
  if (flag === undefined) return undefined
  setFlagsFromString(flag)
  return percent
}
