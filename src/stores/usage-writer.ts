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
import type { UsageStore } from './store.ts'
import { MinuteCounts, type UsageOutcome } from './usage-counts.ts'
import { createFlushRunner, type FlushErrorHandler } from './write-behind.ts'

export type { UsageOutcome } from './usage-counts.ts'

export interface UsageWriterOptions {
  readonly clock: Clock
  /** Default 5000; 0 disables the timer (flush by hand). */
  readonly flushIntervalMs?: number | undefined
  /** Keys and tenants counted apart per minute. Default 100,000. */
  readonly maxSubjectsPerMinute?: number | undefined
  /** Minutes of counts kept while the store fails. Default 60. */
  readonly maxPendingMinutes?: number | undefined
  readonly onError?: FlushErrorHandler | undefined
  /** Subjects per `addUsage` call (three rows each). Default 5,000. */
  readonly subjectsPerWrite?: number | undefined
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

const MINUTE_MS = 60_000

export function createUsageWriter(
  store: Pick<UsageStore, 'addUsage'>,
  options: UsageWriterOptions,
): UsageWriter {
  const { clock } = options
  const maxSubjects = options.maxSubjectsPerMinute ?? 100_000
  const maxPending = options.maxPendingMinutes ?? 60
  let minutes = new Map<number, MinuteCounts>()
  let current: MinuteCounts | undefined
  let droppedMinutes = 0
  /** Overflow of the minutes no longer pending (taken by a flush, or dropped). */
  let overflowBefore = 0

  const minuteAt = (start: number): MinuteCounts => {
    let minute = minutes.get(start)
    if (minute === undefined) {
      minute = new MinuteCounts(start, maxSubjects)
      minutes.set(start, minute)
      for (const [old, counts] of minutes) {
        if (minutes.size <= maxPending) break
        minutes.delete(old)
        overflowBefore += counts.overflow
        droppedMinutes++
      }
    }
    return minute
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
    minute.add(outcome, tenantId, tokenId, by)
  }

  const subjectsPerWrite = options.subjectsPerWrite ?? 5_000

  // A slice of subjects per write, one minute at a time, each slice's rows built just before
  // its write and not held while it runs: with many keys, rows for all of them at once were
  // hundreds of thousands of objects that outlived the young generation.
  const runner = createFlushRunner(
    async () => {
      if (minutes.size === 0) return
      const batch = [...minutes.values()]
      minutes = new Map()
      current = undefined
      for (const minute of batch) overflowBefore += minute.overflow
      for (const [i, minute] of batch.entries()) {
        let stored = 0
        try {
          while (stored < minute.subjects) {
            const count = Math.min(subjectsPerWrite, minute.subjects - stored)
            await store.addUsage(minute.rows(stored, count))
            stored += count
          }
        } catch (error) {
          // Back into the pending counts (merged with what was counted meanwhile): what this
          // flush did not store, and only that.
          minuteAt(minute.start).merge(minute, stored)
          for (const later of batch.slice(i + 1)) minuteAt(later.start).merge(later, 0)
          throw error
        }
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
    stats: () => {
      let overflow = overflowBefore
      for (const minute of minutes.values()) overflow += minute.overflow
      return { pendingMinutes: minutes.size, overflow, droppedMinutes }
    },
  }
}
