/**
 * The process settings a serving tokengate runs with, in one place for `tokengate serve`
 * (cli/commands/serve.ts) and the benchmarks' server (bench/servers/tokengate.ts). Why one
 * function: the bench started `startTokengate` alone, so every gateway, decision and latency
 * number came from a process without the heap bound and the idle collector users run
 * (issue #36, seventh session).
 */
import { boundHeapGrowth, type StartedWith } from './heap-growth.ts'
import { type IdleCollector, memoryReducingGc, startIdleCollector } from './idle-collector.ts'

/**
 * glibc malloc's settings for `serve` (why: bin/tokengate.js, which sets them by starting
 * itself again; it cannot import this module, so test/cli/serve-settings.test.ts checks the
 * two agree on a running process).
 */
export const SERVED_MALLOC_ENV: Readonly<Record<string, string>> = {
  MALLOC_ARENA_MAX: '2',
  MALLOC_MMAP_THRESHOLD_: '32768',
}

/**
 * The Node flags production starts with, the one list: `servedWorkerFlags` (server/workers.ts)
 * and the benchmarks read it; bin/tokengate.js's `#!` line, package.json's "start", the
 * Containerfile and docs/ cannot import it, so test/cli/serve-settings.test.ts checks they agree.
 * They must be given when Node starts (V8 sizes a heap once). Why each: docs/scale-out.md
 * "Memory per instance".
 */
export const PRODUCTION_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=8']

/**
 * The serving main thread's idle collector: only when RSS grew 32 MiB past its peak at the last
 * collection, never on busy time alone (why: lib/idle-collector.ts, `growthFromPeak`): a paced
 * gateway's loads stay well inside 32 MiB of their peak, filling a PAT cache does not.
 */
export const SERVED_IDLE_COLLECTION = {
  growthFromPeak: true,
  minGrowthBytes: 32 * 1024 * 1024,
  minBusyMs: Number.POSITIVE_INFINITY,
} as const

/** What `serveAsProduction` set: the heap growing percent (undefined: the operator's) and the collector. */
export interface ServingProcess {
  readonly heapGrowingPercent: number | undefined
  readonly idle: IdleCollector | undefined
  stop(): void
}

/**
 * Tunes this process for serving once tokengate listens: one process serving gets V8's heap
 * growth bounded and the idle collector; with `workers > 1` the primary only supervises (each
 * worker does both itself: serve-worker.ts, server/workers.ts), so nothing is set here.
 */
export function serveAsProduction(
  started: StartedWith & { readonly workers: number },
): ServingProcess {
  if (started.workers > 1) return { heapGrowingPercent: undefined, idle: undefined, stop: () => {} }
  const heapGrowingPercent = boundHeapGrowth(started)
  const idle = startIdleCollector({ ...SERVED_IDLE_COLLECTION, collect: memoryReducingGc() })
  return { heapGrowingPercent, idle, stop: () => idle.stop() }
}

/**
 * For a process started without bin/tokengate.js (the benchmarks' server): starts it again, same
 * pid, flags and arguments, with `SERVED_MALLOC_ENV` where unset, as the bin does for `serve`.
 * Returns only when nothing needs restarting (already set, not Linux, or no process.execve).
 */
export function restartWithServedMalloc(env: Readonly<Record<string, string | undefined>>): void {
  const missing = Object.keys(SERVED_MALLOC_ENV).some((name) => env[name] === undefined)
  if (process.platform !== 'linux' || !missing || typeof process.execve !== 'function') return
  process.execve(process.execPath, [process.argv0, ...process.execArgv, ...process.argv.slice(1)], {
    ...SERVED_MALLOC_ENV,
    ...env,
  })
}
