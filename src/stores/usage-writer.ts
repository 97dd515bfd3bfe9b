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

  const subjectsPerWrite = options.subjectsPerWrite ?? 5_000
  /** Counts of `minute` from its `skip`-th subject on go back into the pending ones. */
  const putBack = (minute: Minute, skip: number) => {
    const into = minuteAt(minute.start)
    let i = 0
    for (const [scope, id, counts] of subjectsOf(minute)) {
      if (i++ < skip) continue
      if (scope === 'all') add(into.all, counts)
      else {
        const map = scope === 'key' ? into.keys : into.tenants
        const target = map.get(id)
        if (target) add(target, counts)
        else map.set(id, counts)
      }
    }
  }

  // A slice of subjects per write, one minute at a time: with many keys, rows for all of them
  // at once were hundreds of thousands of objects that outlived the young generation.
  const runner = createFlushRunner(
    async () => {
      if (minutes.size === 0) return
      const batch = [...minutes.values()]
      minutes = new Map()
      current = undefined
      for (const [i, minute] of batch.entries()) {
        let stored = 0
        try {
          let rows: UsageRow[] = []
          for (const [scope, id, counts] of subjectsOf(minute)) {
            pushRows(rows, scope, id, counts, minute.start)
            if (rows.length === subjectsPerWrite * BUCKETS.length) {
              await store.addUsage(rows)
              stored += subjectsPerWrite
              rows = []
            }
          }
          if (rows.length > 0) await store.addUsage(rows)
        } catch (error) {
          // Back into the pending counts (merged with what was counted meanwhile): what this
          // flush did not store, and only that.
          putBack(minute, stored)
          for (const later of batch.slice(i + 1)) putBack(later, 0)
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
    stats: () => ({ pendingMinutes: minutes.size, overflow, droppedMinutes }),
  }
}

/** A minute's subjects in a fixed order: the total, then tenants, then keys. */
function* subjectsOf(minute: Minute): Generator<[UsageScope, string, Cell]> {
  yield ['all', '', minute.all]
  for (const [id, counts] of minute.tenants) yield ['tenant', id, counts]
  for (const [id, counts] of minute.keys) yield ['key', id, counts]
}

function add(into: Cell, from: Cell): void {
  into.allowed += from.allowed
  into.unauthorized += from.unauthorized
  into.forbidden += from.forbidden
  into.limited += from.limited
}

/**
 * A subject's minute, hour and day rows for one minute's counts. Within one minute each bucket
 * appears once (a store may add a whole write in one statement); the same hour or day of two
 * minutes goes in two writes and is added up by the store.
 */
function pushRows(
  rows: UsageRow[],
  scope: UsageScope,
  subject: string,
  counts: Cell,
  start: number,
) {
  const tenantId = scope === 'key' ? counts.tenantId : null
  for (const [resolution, length] of BUCKETS) {
    rows.push({
      scope,
      subject,
      resolution,
      bucketStart: Math.floor(start / length) * length,
      tenantId,
      allowed: counts.allowed,
      unauthorized: counts.unauthorized,
      forbidden: counts.forbidden,
      limited: counts.limited,
    })
  }
}
