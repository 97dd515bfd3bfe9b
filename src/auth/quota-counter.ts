/**
 * Quota counting for the gate's `quota` step, atomic across instances and workers and kept
 * in the store, so it survives restarts.
 *
 * Why blocks: a store round trip per request would put the database on the cached-PAT path.
 * Each instance instead reserves a block of uses in one atomic statement (`reserveQuota`,
 * never past the limit) and spends it from memory, synchronously. The next block is asked for
 * in the background once half of the current one is spent (prefetch), so a busy key never
 * waits for the store. Unspent uses held by an instance are not available to the others: at
 * most two blocks of `cap` (`cap = clamp(ceil(limit / 100), 1, maxBlock)`: 1 % of the limit)
 * per instance (and worker). They are given back on a graceful shutdown (to the period and
 * generation they were reserved in: a reset's new count is never lowered by them); a crash
 * loses them for the period. A key's blocks start small and double while each is spent
 * within a second (up to the cap), halve when one lasts a minute.
 *
 * Degraded mode (a slow disk, a slow or unreachable store): a reservation is never waited
 * for on the request path while the key has credit. A quota of at least 100 uses may serve
 * up to `cap` uses on credit while its next reservation is under way; the reservation asks
 * for them too, so they are counted in the store once it answers (reconciled), and uses the
 * store could no longer grant are the overdraft, reported through `onOverdraft`. Credit is
 * given only while the store's last answer this period left at least 10 % of the limit, so
 * the overdraft is at most `cap` uses per instance and period, and in practice none. Without
 * credit (a key's first block of the period on this instance, quotas under 100 uses, near the
 * limit, credit spent) a request waits for the reservation at most `waitMs`, then gets 503
 * `unavailable` with Retry-After: never an unbounded wait, never an unmetered pass. On
 * SQLite the writer thread commits the reservations waiting together in one transaction.
 * docs/limits.md states the bounds.
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
  /** Most uses one instance reserves at once. Default 1000. */
  readonly maxBlock?: number | undefined
  /** How long an exhausted counter is believed before the store is asked again. Default 5000. */
  readonly recheckMs?: number | undefined
  /** Counters held (least recently reserved dropped first, with their unspent uses). */
  readonly maxCounters?: number | undefined
  /** Longest a request without credit waits for a reservation before 503. Default 1000. */
  readonly waitMs?: number | undefined
  /** Uses served on credit that the store could no longer grant (beyond the limit). */
  readonly onOverdraft?: ((counter: string, uses: number) => void) | undefined
}

export interface QuotaCounter {
  /**
   * Takes one use of `quota`: undefined when granted, else `quota_exhausted` (or `unavailable`
   * when the store cannot answer within `waitMs` and the key has no credit: fail closed).
   * Synchronous while this instance holds reserved uses, credit or a fresh exhausted verdict.
   */
  take(quota: Quota): MaybePromise<AuthFailure | undefined>
  /**
   * Puts back the use a `take` just granted, when the request was refused after all (its
   * rate): to this instance's reserved uses while they stay within the bound (`cap - 1`),
   * else to the store, so a small quota's count stays exactly what was served. A use of
   * another period or of an edited quota is dropped, never carried over.
   */
  giveBack(quota: Quota): void
  /**
   * Gives back every unspent reserved use and counts the uses served on credit (graceful
   * shutdown); later takes still work.
   */
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
  /** Served on credit and not yet covered by a reservation. */
  debt: number
  /**
   * Uses the store had left at its last answer (limit − used), Infinity before the first
   * answer of the period: credit is given only while it is far from the limit.
   */
  room: number
  /**
   * Where the store counted them: the period and the counter's generation the reservation
   * returned. A release names both, so it never lowers a count started since (a reset).
   */
  reservedIn: { periodStart: number; generation: number }
  /** Believed exhausted until then (epoch ms); 0 when not exhausted. */
  exhaustedUntil: number
  /** A reservation under way: no second one is sent, takes without credit wait for it. */
  pending: Promise<void> | undefined
  /** Moves on each start-over: a reservation made before it is not spent after it. */
  generation: number
  /** Uses asked for at the next reservation, and when the last one was granted. */
  block: number
  reservedAt: number
  /** Uses given back to the store so far: an exhausted answer older than one is not believed. */
  givenBack: number
  /**
   * Releases sent and not settled yet. The next reservation is sent after them: a store may
   * commit it first otherwise (the SQLite writer answers reservations before the writes queued
   * with them, a pool's connections commit in any order), and count the use given back as spent.
   */
  releasing: Promise<void> | undefined
}

/** The first block of a key: small, so a quiet key holds few uses; also its first credit. */
const FIRST_BLOCK = 4
/** A block spent faster than this makes the next one twice as large (up to the cap). */
const BUSY_MS = 1000
/** A block that lasted longer than this makes the next one half as large. */
const QUIET_MS = 60_000
/** Quotas below this many uses get no credit: they are counted exactly. */
const CREDIT_FROM_LIMIT = 100

export function createQuotaCounter(options: QuotaCounterOptions): QuotaCounter {
  const { store, clock } = options
  const maxBlock = options.maxBlock ?? 1000
  const recheckMs = options.recheckMs ?? 5000
  const maxCounters = options.maxCounters ?? 100_000
  const waitMs = options.waitMs ?? 1000
  const entries = new Map<string, Entry>()

  const capOf = (limit: number) => Math.max(1, Math.min(maxBlock, Math.ceil(limit / 100)))

  /** Uses `entry` may serve before the store answers (see the module comment). */
  const creditOf = (entry: Entry): number => {
    const { limit } = entry.quota
    if (limit < CREDIT_FROM_LIMIT) return 0
    const cap = capOf(limit)
    // Nothing known yet this period (a new instance, a key's first use): the key may be spent
    // already, so its first block is waited for.
    if (entry.room === Number.POSITIVE_INFINITY) return 0
    return entry.room >= limit / 10 ? cap : 0
  }

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
      entry.debt = 0
      entry.room = Number.POSITIVE_INFINITY
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
        debt: 0,
        room: Number.POSITIVE_INFINITY,
        reservedIn: { periodStart: start, generation: 0 },
        exhaustedUntil: 0,
        pending: undefined,
        generation: 0,
        block: FIRST_BLOCK,
        reservedAt: 0,
        givenBack: 0,
        releasing: undefined,
      }
      entries.set(quota.counter, entry)
    }
    return entry
  }

  /**
   * Asks the store for the next block plus the uses served on credit, in the background. Its
   * answer first covers the credit (what it cannot cover is the overdraft), then adds to the
   * block; no answer keeps the debt for the next reservation.
   */
  const reserve = (entry: Entry, now: number): Promise<void> => {
    const { quota } = entry
    const generation = entry.generation
    const owed = entry.debt
    const periodStart = entry.periodStart
    const periodEnd = entry.periodEnd
    const want = nextBlock(entry, now) + owed
    let givenBack = entry.givenBack
    const ask = () => {
      givenBack = entry.givenBack
      return store.reserveQuota(quota.counter, periodStart, quota.limit, want)
    }
    const released = entry.releasing
    const reservation = (released === undefined ? ask() : released.then(ask))
      .then((reserved) => {
        if (entry.generation !== generation) return
        entry.room = quota.limit - reserved.used
        const covered = Math.min(owed, reserved.granted)
        entry.debt -= owed
        if (covered < owed) options.onOverdraft?.(quota.counter, owed - covered)
        const granted = reserved.granted - covered
        if (granted > 0) {
          entry.remaining += granted
          entry.reservedIn = { periodStart: reserved.periodStart, generation: reserved.generation }
          entry.exhaustedUntil = 0
          entry.reservedAt = clock.now()
        } else if (entry.givenBack === givenBack) {
          // Believed unless a use was given back meanwhile (the take then asks again).
          entry.exhaustedUntil = Math.min(periodEnd, now + recheckMs)
        }
        // Uses served on credit while this reservation was under way come out of the block.
        const paid = Math.min(entry.debt, entry.remaining)
        entry.debt -= paid
        entry.remaining -= paid
        return entry.debt > 0 && granted > 0
      })
      .finally(() => {
        entry.pending = undefined
      })
      .then((owing) => {
        // Credit the block could not cover is asked for at once, not at the next request.
        if (owing === true && entry.generation === generation) {
          reserve(entry, clock.now()).catch(() => {})
        }
      })
    entry.pending = reservation
    // Recency: a counter that reserves moves to the end (Map order = least recently reserved).
    entries.delete(quota.counter)
    entries.set(quota.counter, entry)
    return reservation
  }

  /** Half the block spent, nothing asked yet, room left: the next block is asked for now. */
  const prefetch = (entry: Entry, now: number) => {
    if (
      entry.pending === undefined &&
      entry.remaining * 2 <= entry.block &&
      entry.exhaustedUntil <= now &&
      entry.room > 0 &&
      entry.block > 1
    ) {
      reserve(entry, now).catch(() => {})
    }
  }

  const take = (quota: Quota, deadline?: number): MaybePromise<AuthFailure | undefined> => {
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
      prefetch(known, now)
      return undefined
    }
    const period = quotaPeriod(quota, now)
    const entry = entryFor(quota, period)
    if (entry.remaining > 0) {
      entry.remaining--
      prefetch(entry, now)
      return undefined
    }
    if (entry.exhaustedUntil > now) return exhausted(quota, now)
    const pending = entry.pending ?? reserve(entry, now)
    if (entry.debt < creditOf(entry)) {
      entry.debt++
      pending.catch(() => {})
      return undefined
    }
    // No credit: wait for the reservation, but never longer than waitMs in all.
    const until = deadline ?? performance.now() + waitMs
    const left = until - performance.now()
    if (left <= 0) return storeUnavailable()
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<AuthFailure>((resolve) => {
      timer = setTimeout(() => resolve(storeUnavailable()), left)
    })
    const answered = pending.then(
      () => take(quota, until),
      () => storeUnavailable(),
    )
    return Promise.race([answered, timeout]).finally(() => clearTimeout(timer))
  }

  return {
    take: (quota) => take(quota),
    giveBack(quota) {
      const entry = entries.get(quota.counter)
      // By value, as `entryFor` keeps an entry: each store read of a key builds its own Quota,
      // so the refused request's may be another object than the one the entry was made with.
      if (!entry || !sameQuota(entry.quota, quota) || clock.now() >= entry.periodEnd) return
      if (entry.debt > 0) {
        entry.debt--
        return
      }
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
      const released = store
        .releaseQuota(quota.counter, periodStart, generation, 1)
        .then(forget, () => {})
      const before = entry.releasing
      const settled =
        before === undefined ? released : Promise.all([before, released]).then(() => {})
      entry.releasing = settled
      void settled.then(() => {
        if (entry.releasing === settled) entry.releasing = undefined
      })
    },
    async close() {
      // Reservations under way first: what they grant is given back, what they owe counted.
      await Promise.allSettled([...entries.values()].map((entry) => entry.pending))
      await Promise.allSettled(
        [...entries.entries()].flatMap(([counter, entry]) => {
          const work: Promise<unknown>[] = []
          if (entry.debt > 0) {
            const owed = entry.debt
            entry.debt = 0
            work.push(
              store
                .reserveQuota(counter, entry.periodStart, entry.quota.limit, owed)
                .then((reserved) => {
                  if (reserved.granted < owed) {
                    options.onOverdraft?.(counter, owed - reserved.granted)
                  }
                }),
            )
          }
          if (entry.remaining > 0) {
            const count = entry.remaining
            entry.remaining = 0
            const { periodStart, generation } = entry.reservedIn
            work.push(store.releaseQuota(counter, periodStart, generation, count))
          }
          return work
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
