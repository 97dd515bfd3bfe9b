/**
 * Write-behind of usage counts: the outcome recorder counts each decided request in memory
 * (a few map lookups) and, with a journal, appends it there (one write(2), before the request
 * is answered: usage-journal.ts), and a timer adds the counts to the store's minute, hour and
 * day buckets (`addUsage`), where every instance's counts meet. `close()` writes what is left.
 * A process killed between two flushes loses no count: the next process on the data
 * directory adds what its journal holds, and no count twice.
 *
 * Bounded: per minute at most `maxSubjectsPerMinute` keys and tenants are counted apart (more
 * are counted only in the total, and reported in `stats().overflow`); while the store fails,
 * counts are kept (merged, so memory grows with subjects, not requests) for at most
 * `maxPendingMinutes` minutes, the oldest dropped first (`stats().droppedMinutes`).
 */
import type { Clock } from '../core/ports.ts'
import type { UsageStore } from './store.ts'
import { MinuteCounts, type UsageOutcome } from './usage-counts.ts'
import { type UsageJournal, writeMinutes } from './usage-journal.ts'
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
  /**
   * Each count is also appended here before `count` returns (`openUsageJournal`, with this
   * writer's `maxSubjectsPerMinute` and `subjectsPerWrite`), and dropped once stored.
   */
  readonly journal?: UsageJournal | undefined
  /**
   * Adds what killed processes left in the journal directory: a recovery the store refused at
   * start, tried again after each flush that stored (`createFlushRunner`'s `leftover`).
   */
  readonly recoverJournal?: (() => Promise<unknown>) | undefined
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

/** A journal segment grows no further (~1.4 million counts): only while the store is down. */
const MAX_SEGMENT_BYTES = 64 * 1024 * 1024

export function createUsageWriter(
  store: Pick<UsageStore, 'addUsage'>,
  options: UsageWriterOptions,
): UsageWriter {
  const { clock } = options
  const maxSubjects = options.maxSubjectsPerMinute ?? 100_000
  const maxPending = options.maxPendingMinutes ?? 60
  const subjectsPerWrite = options.subjectsPerWrite ?? 5_000
  const journal = options.journal
  let journaling = true
  /** Counts since the journal's segment was last sealed, by minute. */
  let minutes = new Map<number, MinuteCounts>()
  let current: MinuteCounts | undefined
  /** A sealed segment's counts the store has not (all) taken: retried as they are. */
  let sealed:
    | {
        segment: string | undefined
        minutes: MinuteCounts[]
        progress: { minute: number; subject: number }
      }
    | undefined
  let droppedMinutes = 0
  /** Overflow of the minutes no longer pending (stored, or dropped). */
  let overflowBefore = 0

  const minuteAt = (start: number): MinuteCounts => {
    let minute = minutes.get(start)
    if (minute === undefined) {
      minute = new MinuteCounts(start, maxSubjects)
      minutes.set(start, minute)
      for (const [old, counts] of minutes) {
        if (minutes.size + (sealed?.minutes.length ?? 0) <= maxPending) break
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
    if (journal && journaling) {
      try {
        journal.append(start, outcome, by, tenantId, tokenId)
        // A store down for long: the segment stops growing (counts go on in memory).
        if (journal.bytes > MAX_SEGMENT_BYTES) journaling = false
      } catch (error) {
        // A full or failing disk: count in memory alone until the next segment. The segment
        // keeps what it has and is still sealed and marked: a replay of a prefix of a
        // segment's counts cuts sub-slices of the same slices, so it never adds a stored
        // count again (and so a segment never resumes after a gap).
        journaling = false
        ;(options.onError ?? (() => {}))(error)
      }
    }
    let minute = current
    if (minute === undefined || minute.start !== start) {
      minute = minuteAt(start)
      current = minute
    }
    minute.add(outcome, tenantId, tokenId, by)
    runner.due()
  }

  // A slice of subjects per write, one minute at a time, each slice's rows built just before
  // its write and not held while it runs: with many keys, rows for all of them at once were
  // hundreds of thousands of objects that outlived the young generation. A sealed segment's
  // counts are never merged with later ones: its slices are what a replay would cut, so that
  // each is stored once (usage-journal.ts).
  const runner = createFlushRunner(
    async () => {
      if (sealed === undefined) {
        if (minutes.size === 0) return
        const segment = journal?.seal()
        journaling = true
        sealed = {
          segment,
          minutes: [...minutes.values()],
          progress: { minute: 0, subject: 0 },
        }
        minutes = new Map()
        current = undefined
      }
      const batch = sealed
      await writeMinutes(store, batch.segment, batch.minutes, subjectsPerWrite, batch.progress)
      sealed = undefined
      for (const minute of batch.minutes) overflowBefore += minute.overflow
      if (batch.segment !== undefined) journal?.remove(batch.segment)
    },
    options.flushIntervalMs ?? 5000,
    options.onError,
    () => minutes.size > 0 || sealed !== undefined,
    options.recoverJournal,
  )

  return {
    count: (outcome, tenantId, tokenId) => add1(outcome, tenantId, tokenId, 1),
    uncount: (outcome, tenantId, tokenId) => add1(outcome, tenantId, tokenId, -1),
    // What was counted meanwhile follows a stored batch at once.
    flush: () => runner.flush().then(() => (minutes.size > 0 ? runner.flush() : undefined)),
    async close() {
      await runner.close()
      if (minutes.size > 0) await runner.flush()
      // Everything counted is stored (close rejects otherwise: the journal stays for a restart).
      journal?.close()
    },
    stats: () => {
      let overflow = overflowBefore
      for (const minute of minutes.values()) overflow += minute.overflow
      for (const minute of sealed?.minutes ?? []) overflow += minute.overflow
      return {
        pendingMinutes: minutes.size + (sealed?.minutes.length ?? 0),
        overflow,
        droppedMinutes,
      }
    },
  }
}
