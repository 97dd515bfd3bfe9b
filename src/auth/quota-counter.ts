/**
 * Quota counting for the gate's `quota` step, atomic across instances and workers and kept
 * in the store, so it survives restarts.
 *
 * Why blocks: a store round trip per request would put the database on the cached-PAT path.
 * Each instance instead reserves a block of uses in one atomic statement (`reserveQuota`,
 * never past the limit) and spends it from memory, synchronously; it asks the store again
 * only when its block is spent. A quota is therefore never exceeded: every use served was
 * reserved in the store first. The price is under-use, bounded: uses an instance reserved
 * and has not spent are not available to the others, at most `cap - 1` per instance (and
 * worker), where `cap = clamp(ceil(limit / 100), 1, maxBlock)`: 1 % of the limit. They are
 * given back on a graceful shutdown (to the period and generation they were reserved in: a
 * reset's new count is never lowered by them); a crash loses them for the period. A key's blocks start
 * small and double while each is spent within a second (up to the cap), halve when one lasts
 * a minute: a busy key asks the store rarely, a quiet one holds few uses. docs/limits.md
 * states the bound.
 *
 * An exhausted counter is believed for `recheckMs` (or until its period ends), so a flood
 * from an exhausted key costs one store query per `recheckMs` per instance, not one per
 * request. Any change of the key's quota (an edit, a usage reset) reaches the gate as a new
 * quota on the principal (the store's `pat_changed` drops the cached key everywhere), and
 * drops this instance's block and verdict for it.
 */
import type { AuthFailure } from '../core/failure.ts'
import type { Clock, Quota } from '../core/ports.ts'
import { exhaustedState, quotaPeriod } from '../core/quota.ts'
import { storeUnavailable } from '../core/tenant-rules.ts'
import type { MaybePromise } from '../lib/maybe-async.ts'
import type { QuotaStore } from '../stores/store.ts'

export interface QuotaCounterOptions {
  readonly store: Pick<QuotaStore, 'reserveQuota' | 'releaseQuota'>
  readonly clock: Clock
  /** Most uses one instance reserves at once. Default 100. */
  readonly maxBlock?: number | undefined
  /** How long an exhausted counter is believed before the store is asked again. Default 5000. */
  readonly recheckMs?: number | undefined
  /** Counters held (least recently reserved dropped first, with their unspent uses). */
  readonly maxCounters?: number | undefined
}

export interface QuotaCounter {
  /**
   * Takes one use of `quota`: undefined when granted, else `quota_exhausted` (or `unavailable`
   * when the store cannot be asked: fail closed). Synchronous while this instance holds
   * reserved uses or a fresh exhausted verdict.
   */
  take(quota: Quota): MaybePromise<AuthFailure | undefined>
  /**
   * Puts back the use a `take` just granted, when the request was refused after all (its
   * rate): to this instance's reserved uses while they stay within the bound (`cap - 1`),
   * else to the store, so a small quota's count stays exactly what was served. A use of
   * another period or of an edited quota is dropped, never carried over.
   */
  giveBack(quota: Quota): void
  /** Gives back every unspent reserved use (graceful shutdown); later takes still work. */
  close(): Promise<void>
}

/** One counter's state on this instance. */
interface Entry {
  /** The quota it was reserved under; another one (edited or reset) starts over. */
  quota: Quota
  periodStart: number
  /** When the period ends (epoch ms; Infinity without refill). */
  periodEnd: number
  /** Reserved in the store and not spent yet. */
  remaining: number
  /**
   * Where the store counted them: the period and the counter's generation the reservation
   * returned. A release names both, so it never lowers a count started since (a reset).
   */
  reservedIn: { periodStart: number; generation: number }
  /** Believed exhausted until then (epoch ms); 0 when not exhausted. */
  exhaustedUntil: number
  /** A reservation under way: later takes wait for it instead of asking again. */
  pending: Promise<void> | undefined
  /** Moves on each start-over: a reservation made before it is not spent after it. */
  generation: number
  /** Uses asked for at the next reservation, and when the last one was granted. */
  block: number
  reservedAt: number
  /** Uses given back to the store so far: an exhausted answer older than one is not believed. */
  givenBack: number
}

/** The first block of a key: small, so a quiet key holds few uses. */
const FIRST_BLOCK = 4
/** A block spent faster than this makes the next one twice as large (up to the cap). */
const BUSY_MS = 1000
/** A block that lasted longer than this makes the next one half as large. */
const QUIET_MS = 60_000

export function createQuotaCounter(options: QuotaCounterOptions): QuotaCounter {
  const { store, clock } = options
  const maxBlock = options.maxBlock ?? 1000
  const recheckMs = options.recheckMs ?? 5000
  const maxCounters = options.maxCounters ?? 100_000
  const entries = new Map<string, Entry>()

  const capOf = (limit: number) => Math.max(1, Math.min(maxBlock, Math.ceil(limit / 100)))

  /** The next block of `entry`: doubled when the last was spent fast, halved when slowly. */
  const nextBlock = (entry: Entry, now: number): number => {
    const cap = capOf(entry.quota.limit)
    const since = now - entry.reservedAt
    if (entry.reservedAt > 0 && since < BUSY_MS) entry.block *= 2
    else if (entry.reservedAt > 0 && since > QUIET_MS) entry.block = Math.floor(entry.block / 2)
    entry.block = Math.max(1, Math.min(cap, entry.block))
    return entry.block
  }

  /** The entry for `quota` in `period`, fresh when the quota or period changed. */
  const entryFor = (quota: Quota, period: { start: number; end: number | null }): Entry => {
    const start = period.start
    let entry = entries.get(quota.counter)
    if (entry && (entry.periodStart !== start || !sameQuota(entry.quota, quota))) {
      // Unspent uses of another period or of the quota before an edit are dropped, never
      // spent: spending them could exceed the quota as it is now.
      entry.quota = quota
      entry.periodStart = start
      entry.periodEnd = period.end ?? Number.POSITIVE_INFINITY
      entry.remaining = 0
      entry.exhaustedUntil = 0
      entry.generation++
      entry.block = FIRST_BLOCK
      entry.reservedAt = 0
    }
    if (!entry) {
      if (entries.size >= maxCounters) {
        const oldest = entries.keys().next().value
        if (oldest !== undefined) entries.delete(oldest)
      }
      entry = {
        quota,
        periodStart: start,
        periodEnd: period.end ?? Number.POSITIVE_INFINITY,
        remaining: 0,
        reservedIn: { periodStart: start, generation: 0 },
        exhaustedUntil: 0,
        pending: undefined,
        generation: 0,
        block: FIRST_BLOCK,
        reservedAt: 0,
        givenBack: 0,
      }
      entries.set(quota.counter, entry)
    }
    return entry
  }

  const take = (quota: Quota): MaybePromise<AuthFailure | undefined> => {
    const now = clock.now()
    // The hot path: the same quota, in the same period, with reserved uses left.
    const known = entries.get(quota.counter)
    if (
      known !== undefined &&
      known.quota === quota &&
      known.remaining > 0 &&
      now < known.periodEnd
    ) {
      known.remaining--
      return undefined
    }
    const period = quotaPeriod(quota, now)
    const entry = entryFor(quota, period)
    if (entry.remaining > 0) {
      entry.remaining--
      return undefined
    }
    if (entry.exhaustedUntil > now) return exhausted(quota, now)
    if (entry.pending) return entry.pending.then(() => take(quota))
    const generation = entry.generation
    const givenBack = entry.givenBack
    const reservation = store
      .reserveQuota(quota.counter, period.start, quota.limit, nextBlock(entry, now))
      .then((reserved) => {
        if (entry.generation !== generation) return
        if (reserved.granted > 0) {
          entry.remaining += reserved.granted
          entry.reservedIn = { periodStart: reserved.periodStart, generation: reserved.generation }
          entry.exhaustedUntil = 0
          entry.reservedAt = clock.now()
        } else {
          // Believed unless a use was given back meanwhile (the take then asks again).
          if (entry.givenBack === givenBack) {
            entry.exhaustedUntil = Math.min(period.end ?? Number.POSITIVE_INFINITY, now + recheckMs)
          }
        }
      })
      .finally(() => {
        entry.pending = undefined
      })
    entry.pending = reservation
    // Recency: a counter that reserves moves to the end (Map order = least recently reserved).
    entries.delete(quota.counter)
    entries.set(quota.counter, entry)
    return reservation.then(
      () => take(quota),
      () => storeUnavailable(),
    )
  }

  return {
    take,
    giveBack(quota) {
      const entry = entries.get(quota.counter)
      if (entry?.quota !== quota || clock.now() >= entry.periodEnd) return
      if (entry.remaining < capOf(quota.limit) - 1) {
        entry.remaining++
        return
      }
      const { periodStart, generation } = entry.reservedIn
      // The use is free again: an exhausted verdict reached meanwhile is not believed. Not
      // given back when the store is down: an unused use is lost, never one too many.
      const forget = () => {
        entry.givenBack++
        entry.exhaustedUntil = 0
      }
      forget()
      store.releaseQuota(quota.counter, periodStart, generation, 1).then(forget, () => {})
    },
    async close() {
      const unspent = [...entries.entries()].filter(([, entry]) => entry.remaining > 0)
      await Promise.allSettled(
        unspent.map(([counter, entry]) => {
          const count = entry.remaining
          entry.remaining = 0
          const { periodStart, generation } = entry.reservedIn
          return store.releaseQuota(counter, periodStart, generation, count)
        }),
      )
    },
  }
}

function exhausted(quota: Quota, now: number): AuthFailure {
  return { code: 'quota_exhausted', quota: exhaustedState(quota, now) }
}

/** Whether two quotas count alike (the same object, or equal in every field). */
function sameQuota(a: Quota, b: Quota): boolean {
  return (
    a === b ||
    (a.limit === b.limit &&
      a.refill === b.refill &&
      a.intervalSec === b.intervalSec &&
      a.anchorAt === b.anchorAt &&
      a.resetAt === b.resetAt &&
      a.counter === b.counter)
  )
}
