/**
 * The SQLite writes the request path causes, off the event loop: audit events, PAT last-used
 * times, usage counts, quota reservations and retention run on a worker thread with a
 * connection of its own (sqlite-writer-worker.ts), so that a slow fsync or a write lock held
 * by another process stalls that thread, never a request.
 *
 * `node:sqlite` is synchronous: on the main thread every commit (with `synchronous = FULL`, an
 * fsync of the WAL) blocked every request for its duration. The worker commits exactly as
 * before (same statements, same durability); the main thread only posts the batch and awaits
 * the answer. What a power cut can lose is unchanged: what was not yet committed (the
 * write-behind interval; audit events are also in the audit spool until stored).
 */
import { extname } from 'node:path'
import { setFlagsFromString } from 'node:v8'
import { Worker } from 'node:worker_threads'
import { gcFlagLock } from '../lib/idle-collector.ts'
import { encodePatUses } from './sql/keys.ts'
import { openSqliteStore, type SqliteStoreOptions } from './sqlite.ts'
import type { AddUsageOptions, Store } from './store.ts'
import { withOverrides } from './store-overrides.ts'
import { encodeUsage, isUsageBatch, type UsageRows } from './usage-batch.ts'

/** The store methods the worker runs: each takes and returns structured-cloneable values. */
export const OFFLOADED_WRITES = [
  'appendAudit',
  'recordPatUse',
  'addUsage',
  'reserveQuota',
  'releaseQuota',
  'pruneAudit',
  'pruneUsage',
  'pruneChangeLog',
] as const

type Offloaded = (typeof OFFLOADED_WRITES)[number]

/** A write for the worker, or `settled`: answered once every write sent before it is done. */
export interface WriterRequest {
  readonly id: number
  readonly method: Offloaded | 'settled'
  readonly args: readonly unknown[]
}

export type WriterReply =
  | { readonly id: number; readonly ok: true; readonly value: unknown }
  | { readonly id: number; readonly ok: false; readonly error: { name: string; message: string } }

/**
 * The SQLite store at `path` with its write-behind writes sent to a worker thread on the same
 * database file. The worker starts once `migrate()` has made the schema it writes, so a
 * server's first request never waits for a thread to start (or on the first such write, for a
 * store opened without migrating); `close()` waits for every write sent before it, then stops
 * the worker.
 */
export function openSqliteWithWriter(path: string, options: SqliteStoreOptions = {}): Store {
  const busyTimeoutMs = options.busyTimeoutMs
  let worker: Worker | undefined
  let nextId = 0
  const pending = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>()

  const start = (): Worker => {
    const url = new URL(`./sqlite-writer-worker${extname(import.meta.url)}`, import.meta.url)
    // The thread takes an idle collector: it must share the process's lock for that.
    gcFlagLock()
    const started = withoutSemiSpaceFlag(
      () =>
        new Worker(url, {
          workerData: { path, busyTimeoutMs },
          // Why: the thread holds one batch at a time, yet V8 sizes its young generation like
          // the main thread's (the bin's 8 MB semi-spaces: 16 MB committed). Only the young
          // generation is bounded: a batch larger than it is promoted, never refused.
          resourceLimits: { maxYoungGenerationSizeMb: WRITER_YOUNG_GENERATION_MB },
        }),
    )
    // The worker never keeps the process alive; close() settles what is under way.
    started.unref()
    started.on('message', (reply: WriterReply) => {
      const waiting = pending.get(reply.id)
      if (!waiting) return
      pending.delete(reply.id)
      if (reply.ok) waiting.resolve(reply.value)
      else waiting.reject(Object.assign(new Error(reply.error.message), { name: reply.error.name }))
    })
    const fail = (error: Error) => {
      for (const waiting of pending.values()) waiting.reject(error)
      pending.clear()
      worker = undefined
    }
    started.on('error', fail)
    started.on('exit', (code) => {
      if (pending.size > 0) fail(new Error(`the SQLite writer thread exited (${code})`))
      worker = undefined
    })
    return started
  }

  const send = (method: WriterRequest['method'], args: readonly unknown[]): Promise<unknown> => {
    worker ??= start()
    const id = nextId++
    const request: WriterRequest = { id, method, args }
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject })
      worker?.postMessage(request)
    })
  }

  const store = openSqliteStore(path, {
    ...options,
    pruneChangeLog: (before) => send('pruneChangeLog', [before]),
  })
  const overrides: Record<string, unknown> = {}
  for (const method of OFFLOADED_WRITES) {
    overrides[method] = (...args: unknown[]) => send(method, args)
  }
  // Usage rows and last-used times go as one JSON text each, the form their statement reads
  // (sql/usage.ts, sql/keys.ts): the thread rebuilds no row objects or Map. An empty batch
  // writes nothing: answered here.
  overrides.recordPatUse = (uses: ReadonlyMap<string, number>) =>
    uses.size === 0 ? store.recordPatUse(uses) : send('recordPatUse', [encodePatUses(uses)])
  overrides.addUsage = (usage: UsageRows, options?: AddUsageOptions) => {
    const batch = isUsageBatch(usage) ? usage : encodeUsage(usage)
    return batch.rows === 0 ? store.addUsage(batch, options) : send('addUsage', [batch, options])
  }
  overrides.migrate = async () => {
    const applied = await store.migrate()
    worker ??= start()
    return applied
  }
  overrides.close = async () => {
    const running = worker
    if (running) {
      // Every write sent before close() is answered first: messages are handled in order.
      await send('settled', []).catch(() => {})
      await running.terminate()
    }
    await store.close()
  }
  return withOverrides(store, overrides)
}

/** The writer isolate's young generation (V8 makes it 2 MB: two 1 MB semi-spaces). */
const WRITER_YOUNG_GENERATION_MB = 3

/**
 * Creates the worker with V8's `--max-semi-space-size` unset, then sets it back once the
 * worker runs. Why: the flag is process-wide and wins over a Worker's `resourceLimits`, so
 * under the bin's `--max-semi-space-size=8` the writer's 3 MB bound was ignored (16 MB young
 * generation committed). V8 reads the flag only when it sets up an isolate's heap: the main
 * thread's, set up long before, keeps its semi-spaces. A `--min-semi-space-size` can stay: V8
 * clamps a minimum to the maximum (the writer's young generation read 2 MB with one of 8).
 */
function withoutSemiSpaceFlag(create: () => Worker): Worker {
  const flag = semiSpaceFlag()
  if (flag === undefined) return create()
  setFlagsFromString('--max-semi-space-size=0')
  let worker: Worker
  try {
    worker = create()
  } catch (error) {
    setFlagsFromString(flag)
    throw error
  }
  let restored = false
  const restore = () => {
    if (!restored) setFlagsFromString(flag)
    restored = true
  }
  for (const event of ['online', 'error', 'exit']) worker.once(event, restore)
  return worker
}

/**
 * The `--max-semi-space-size` on this process's command line (its last one), if any. Set in
 * NODE_OPTIONS instead, it is not seen here (only config/load.ts reads the environment) and
 * the writer keeps the process's semi-spaces.
 */
function semiSpaceFlag(): string | undefined {
  const given = process.execArgv
  let flag: string | undefined
  for (const [i, arg] of given.entries()) {
    const match = /^--max[-_]semi[-_]space[-_]size(?:=(\d+))?$/.exec(arg)
    const value = match ? (match[1] ?? given[i + 1]) : undefined
    if (value !== undefined && /^\d+$/.test(value)) flag = `--max-semi-space-size=${value}`
  }
  return flag
}
