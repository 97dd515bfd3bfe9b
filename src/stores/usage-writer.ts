/**
 * Write-behind of usage counts: the outcome recorder counts each decided request in memory
 * (a few map lookups, no I/O), and a timer adds the counts to the store's minute, hour and day
 * buckets (`addUsage`), where every instance's counts meet. `close()` writes what is left.
 *
 * Bounded: per minute at most `maxSubjectsPerMinute` keys and tenants are counted apart (more
 * are counted only in the total, and reported in `stats().overflow`); while the store fails,
 * counts are kept (merged, so memory grows with subjects, not requests) for at most
 * `maxPendingMinutes` minutes, the oldest dropped first (`stats().droppedMinutes`).
 */
import type { Clock } from '../core/ports.ts'
import type { UsageResolution, UsageRow, UsageScope, UsageStore } from './store.ts'
import { createFlushRunner, type FlushErrorHandler } from './write-behind.ts'

export type UsageOutcome = 'allowed' | 'unauthorized' | 'forbidden' | 'limited'

export interface UsageWriterOptions {
  readonly clock: Clock
  /** Default 5000; 0 disables the timer (flush by hand). */
  readonly flushIntervalMs?: number | undefined
  /** Keys and tenants counted apart per minute. Default 100,000. */
  readonly maxSubjectsPerMinute?: number | undefined
  /** Minutes of counts kept while the store fails. Default 60. */
  readonly maxPendingMinutes?: number | undefined
  readonly onError?: FlushErrorHandler | undefined
}

export interface UsageWriter {
  /** Counts one decided request (memory only, O(1)). */
  count(outcome: UsageOutcome, tenantId: string | null, tokenId: string | null): void
  /** Takes back one count (a request first allowed, then refused by a route's own check). */
  uncount(outcome: UsageOutcome, tenantId: string | null, tokenId: string | null): void
  /** Adds every pending count to the store; rejects (keeping them) when the store fails. */
  flush(): Promise<void>
  close(): Promise<void>
  stats(): {
    readonly pendingMinutes: number
    readonly overflow: number
    readonly droppedMinutes: number
  }
}

/** One subject's counts in one minute. */
interface Cell {
  readonly tenantId: string | null
  allowed: number
  unauthorized: number
  forbidden: number
  limited: number
}

interface Minute {
  readonly start: number
  readonly keys: Map<string, Cell>
  readonly tenants: Map<string, Cell>
  readonly all: Cell
}

const MINUTE_MS = 60_000
const HOUR_MS = 3_600_000
const DAY_MS = 86_400_000
const BUCKETS: readonly [UsageResolution, number][] = [
  ['minute', MINUTE_MS],
  ['hour', HOUR_MS],
  ['day', DAY_MS],
]

const cell = (tenantId: string | null): Cell => ({
  tenantId,
  allowed: 0,
  unauthorized: 0,
  forbidden: 0,
  limited: 0,
})

export function createUsageWriter(
  store: Pick<UsageStore, 'addUsage'>,
  options: UsageWriterOptions,
): UsageWriter {
  const { clock } = options
  const maxSubjects = options.maxSubjectsPerMinute ?? 100_000
  const maxPending = options.maxPendingMinutes ?? 60
  let minutes = new Map<number, Minute>()
  let current: Minute | undefined
  let overflow = 0
  let droppedMinutes = 0

  const minuteAt = (start: number): Minute => {
    let minute = minutes.get(start)
    if (minute === undefined) {
      minute = { start, keys: new Map(), tenants: new Map(), all: cell(null) }
      minutes.set(start, minute)
      for (const old of minutes.keys()) {
        if (minutes.size <= maxPending) break
        minutes.delete(old)
        droppedMinutes++
      }
    }
    return minute
  }

  const subject = (map: Map<string, Cell>, id: string, tenantId: string | null, minute: Minute) => {
    let found = map.get(id)
    if (found === undefined) {
      if (minute.keys.size + minute.tenants.size >= maxSubjects) {
        overflow++
        return undefined
      }
      found = cell(tenantId)
      map.set(id, found)
    }
    return found
  }

  const add1 = (
    outcome: UsageOutcome,
    tenantId: string | null,
    tokenId: string | null,
    by: 1 | -1,
  ) => {
    const start = Math.floor(clock.now() / MINUTE_MS) * MINUTE_MS
    let minute = current
    if (minute === undefined || minute.start !== start) {
      minute = minuteAt(start)
      current = minute
    }
    minute.all[outcome] += by
    if (tenantId === null) return
    const tenant = subject(minute.tenants, tenantId, null, minute)
    if (tenant) tenant[outcome] += by
    if (tokenId === null) return
    const key = subject(minute.keys, tokenId, tenantId, minute)
    if (key) key[outcome] += by
  }

  const runner = createFlushRunner(
    async () => {
      if (minutes.size === 0) return
      const batch = minutes
      minutes = new Map()
      current = undefined
      try {
        await store.addUsage(rowsOf(batch))
      } catch (error) {
        // Back into the pending counts, merged with what was counted meanwhile.
        for (const minute of batch.values()) merge(minuteAt(minute.start), minute)
        throw error
      }
    },
    options.flushIntervalMs ?? 5000,
    options.onError,
  )

  return {
    count: (outcome, tenantId, tokenId) => add1(outcome, tenantId, tokenId, 1),
    uncount: (outcome, tenantId, tokenId) => add1(outcome, tenantId, tokenId, -1),
    flush: runner.flush,
    close: runner.close,
    stats: () => ({ pendingMinutes: minutes.size, overflow, droppedMinutes }),
  }
}

function merge(into: Minute, from: Minute): void {
  add(into.all, from.all)
  for (const [map, source] of [
    [into.keys, from.keys],
    [into.tenants, from.tenants],
  ] as const) {
    for (const [id, counts] of source) {
      const target = map.get(id)
      if (target) add(target, counts)
      else map.set(id, counts)
    }
  }
}

function add(into: Cell, from: Cell): void {
  into.allowed += from.allowed
  into.unauthorized += from.unauthorized
  into.forbidden += from.forbidden
  into.limited += from.limited
}

/** The rows for the store: every subject's minute, hour and day bucket, each bucket once. */
function rowsOf(minutes: ReadonlyMap<number, Minute>): UsageRow[] {
  const rows = new Map<string, UsageRow & Cell>()
  const put = (scope: UsageScope, subject: string, counts: Cell, start: number) => {
    for (const [resolution, length] of BUCKETS) {
      const bucketStart = Math.floor(start / length) * length
      const id = `${scope}\n${subject}\n${resolution}\n${bucketStart}`
      const row = rows.get(id)
      if (row) add(row, counts)
      else {
        rows.set(id, {
          scope,
          subject,
          resolution,
          bucketStart,
          tenantId: scope === 'key' ? counts.tenantId : null,
          allowed: counts.allowed,
          unauthorized: counts.unauthorized,
          forbidden: counts.forbidden,
          limited: counts.limited,
        })
      }
    }
  }
  for (const minute of minutes.values()) {
    put('all', '', minute.all, minute.start)
    for (const [id, counts] of minute.tenants) put('tenant', id, counts, minute.start)
    for (const [id, counts] of minute.keys) put('key', id, counts, minute.start)
  }
  return [...rows.values()]
}
