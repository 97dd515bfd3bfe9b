/**
 * Quota periods (DESIGN "Keys as a product"): a quota of `limit` uses refills at the start of
 * each UTC day, each UTC month, or every `intervalSec` from its anchor; without refill there
 * is one period, forever. Every instance computes the same period from the same clock rule,
 * and the store keeps one count per period, so instances agree on what a period is.
 */
import type { QuotaState } from './failure.ts'
import type { Quota } from './ports.ts'

const DAY_MS = 86_400_000

/** The shortest and longest refill interval, in seconds. */
export const MIN_QUOTA_INTERVAL_SEC = 60
export const MAX_QUOTA_INTERVAL_SEC = 366 * 86_400
/** The largest quota limit: counts stay exact in a double and in a Postgres bigint. */
export const MAX_QUOTA_LIMIT = 1_000_000_000_000

export interface QuotaPeriod {
  /** Epoch ms; 0 for a quota without refill. */
  readonly start: number
  /** When the next period starts (epoch ms), or null without refill. */
  readonly end: number | null
}

/** The period `now` falls in. */
export function quotaPeriod(quota: Quota, now: number): QuotaPeriod {
  switch (quota.refill) {
    case 'none':
      return { start: 0, end: null }
    case 'daily': {
      const start = Math.floor(now / DAY_MS) * DAY_MS
      return { start, end: start + DAY_MS }
    }
    case 'monthly': {
      const date = new Date(now)
      const start = Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1)
      return { start, end: Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1) }
    }
    case 'interval': {
      const length = (quota.intervalSec ?? MIN_QUOTA_INTERVAL_SEC) * 1000
      const anchor = quota.anchorAt ?? 0
      const start = anchor + Math.floor((now - anchor) / length) * length
      return { start, end: start + length }
    }
    default:
      return quota.refill satisfies never
  }
}

/** What a 429 says of a quota exhausted at `now`. */
export function exhaustedState(quota: Quota, now: number): QuotaState {
  const { end } = quotaPeriod(quota, now)
  return {
    limit: quota.limit,
    refill: quota.refill,
    resetsAt: end,
    retryAfterSec: end === null ? undefined : Math.max(1, Math.ceil((end - now) / 1000)),
  }
}
