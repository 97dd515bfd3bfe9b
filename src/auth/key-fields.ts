/**
 * The fields that make a PAT a product (issue #24): its own rate limit, its quota, operator
 * metadata and an external id. The one home of their rules: the CLI, the admin API, the
 * console and library callers all issue and edit keys through pat-lifecycle.ts, which checks
 * every value here and refuses a bad one as `invalid_input`, naming the field and the value.
 */
import {
  escapeUnsafeText,
  isPermission,
  isSafeText,
  MAX_PERMISSION_LENGTH,
} from '../core/operator-text.ts'
import {
  MAX_METADATA_BYTES,
  type Quota,
  type QuotaRefill,
  type RateLimitOverride,
} from '../core/ports.ts'
import {
  MAX_QUOTA_INTERVAL_SEC,
  MAX_QUOTA_LIMIT,
  MIN_QUOTA_INTERVAL_SEC,
  quotaPeriod,
} from '../core/quota.ts'
import type { QuotaStore } from '../stores/store.ts'
import { OperationRefused } from './operations.ts'

export const MAX_EXTERNAL_ID_LENGTH = 255
export const MAX_KEY_NAME_LENGTH = 100
/** The longest window of a rate limit, as for the configured defaults (one day). */
export const MAX_RATE_LIMIT_WINDOW_SEC = 86_400
export const MAX_RATE_LIMIT = 1_000_000_000
export const QUOTA_REFILLS: readonly QuotaRefill[] = ['none', 'daily', 'monthly', 'interval']

/** A quota as an operator states it; the counter and anchor are the lifecycle's to set. */
export interface QuotaSpec {
  readonly limit: number
  readonly refill: QuotaRefill
  /** `interval` only: the period in seconds. */
  readonly intervalSec?: number | undefined
}

/** A refusal that names the field and shows the bad value (escaped, shortened). */
export function badValue(field: string, value: unknown, expected: string): OperationRefused {
  return new OperationRefused(
    'invalid_input',
    field,
    `${field}: ${shownValue(value)} is not valid; expected ${expected}`,
  )
}

/** A value as a refusal quotes it: JSON, invisible characters escaped, at most 60 characters. */
function shownValue(value: unknown): string {
  const text = escapeUnsafeText(String(JSON.stringify(value)))
  return text.length > 60 ? `${text.slice(0, 57)}...` : text
}

const wholeNumber = (value: unknown, min: number, max: number): value is number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= min && value <= max

export function checkRateLimit(value: RateLimitOverride): RateLimitOverride {
  if (!wholeNumber(value.max, 1, MAX_RATE_LIMIT)) {
    throw badValue(
      'rate limit',
      value.max,
      `a whole number of requests from 1 to ${MAX_RATE_LIMIT}`,
    )
  }
  if (!wholeNumber(value.windowSec, 1, MAX_RATE_LIMIT_WINDOW_SEC)) {
    throw badValue(
      'rate limit window',
      value.windowSec,
      `a whole number of seconds from 1 to ${MAX_RATE_LIMIT_WINDOW_SEC}`,
    )
  }
  return { max: value.max, windowSec: value.windowSec }
}

export function checkQuotaSpec(value: QuotaSpec): QuotaSpec {
  if (!wholeNumber(value.limit, 1, MAX_QUOTA_LIMIT)) {
    throw badValue('quota', value.limit, `a whole number of uses from 1 to ${MAX_QUOTA_LIMIT}`)
  }
  if (!QUOTA_REFILLS.includes(value.refill)) {
    throw badValue('quota refill', value.refill, QUOTA_REFILLS.join(', '))
  }
  if (value.refill !== 'interval') {
    if (value.intervalSec !== undefined) {
      throw badValue('quota interval', value.intervalSec, 'an interval only with refill interval')
    }
    return { limit: value.limit, refill: value.refill }
  }
  if (!wholeNumber(value.intervalSec, MIN_QUOTA_INTERVAL_SEC, MAX_QUOTA_INTERVAL_SEC)) {
    throw badValue(
      'quota interval',
      value.intervalSec,
      `a whole number of seconds from ${MIN_QUOTA_INTERVAL_SEC} to ${MAX_QUOTA_INTERVAL_SEC} (366 days)`,
    )
  }
  return { limit: value.limit, refill: 'interval', intervalSec: value.intervalSec }
}

/**
 * The stored quota for `spec`: counted in `counter`; an interval keeps its anchor while its
 * length is unchanged (an edit of the limit is no refill), else periods start at `now`.
 */
export function quotaFrom(
  spec: QuotaSpec,
  counter: string,
  previous: Quota | null | undefined,
  now: number,
): Quota {
  // A reset stays a reset: the uses counted since it are the count.
  const reset = previous?.resetAt === undefined ? {} : { resetAt: previous.resetAt }
  if (spec.refill !== 'interval')
    return { limit: spec.limit, refill: spec.refill, counter, ...reset }
  const anchorAt =
    previous?.refill === 'interval' && previous.intervalSec === spec.intervalSec
      ? (previous.anchorAt ?? now)
      : now
  return {
    limit: spec.limit,
    refill: 'interval',
    intervalSec: spec.intervalSec,
    anchorAt,
    counter,
    ...reset,
  }
}

/**
 * Metadata: a JSON object of at most `MAX_METADATA_BYTES` (UTF-8). Kept as given; the gate
 * never reads it, so its only bound is size (it is stored per key and sent to every reader).
 */
export function checkMetadata(value: unknown): Readonly<Record<string, unknown>> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw badValue('metadata', value, 'a JSON object')
  }
  let text: string
  try {
    text = JSON.stringify(value)
  } catch {
    throw badValue('metadata', '(unserialisable)', 'a JSON object')
  }
  const bytes = Buffer.byteLength(text, 'utf8')
  if (bytes > MAX_METADATA_BYTES) {
    throw new OperationRefused(
      'invalid_input',
      'metadata',
      `metadata: ${bytes} bytes of JSON is too large; expected at most ${MAX_METADATA_BYTES} bytes`,
    )
  }
  return JSON.parse(text) as Record<string, unknown>
}

export function checkExternalId(value: string): string {
  if (value.length === 0 || value.length > MAX_EXTERNAL_ID_LENGTH || !isSafeText(value)) {
    throw badValue(
      'external id',
      value,
      `1-${MAX_EXTERNAL_ID_LENGTH} characters without control, bidi or zero-width characters`,
    )
  }
  return value
}

export function checkKeyName(value: string): string {
  if (value.length > MAX_KEY_NAME_LENGTH || !isSafeText(value)) {
    throw badValue(
      'name',
      value,
      `0-${MAX_KEY_NAME_LENGTH} characters without control, bidi or zero-width characters`,
    )
  }
  return value
}

export function checkKeyPermissions(values: readonly string[]): string[] {
  for (const value of values) {
    if (!isPermission(value)) {
      throw badValue(
        'permission',
        value,
        `e.g. tokens:read (at most ${MAX_PERMISSION_LENGTH} characters)`,
      )
    }
  }
  return [...new Set(values)]
}

/** A key's quota as shown: its rule, and what is left of the current period. */
export interface QuotaView {
  readonly limit: number
  readonly refill: QuotaRefill
  readonly intervalSec: number | null
  readonly used: number
  readonly remaining: number
  readonly periodStart: string | null
  readonly resetsAt: string | null
}

/**
 * The quota of a key with its count in the store. `used` counts uses reserved by instances
 * (up to a block each, docs/limits.md), so it may run a little ahead of the requests served.
 */
export async function quotaView(
  store: Pick<QuotaStore, 'readQuota'>,
  quota: Quota,
  now: number,
): Promise<QuotaView> {
  const period = quotaPeriod(quota, now)
  const count = (await store.readQuota([quota.counter])).get(quota.counter)
  const used = count && count.periodStart >= period.start ? Math.min(count.used, quota.limit) : 0
  return {
    limit: quota.limit,
    refill: quota.refill,
    intervalSec: quota.intervalSec ?? null,
    used,
    remaining: quota.limit - used,
    periodStart: quota.refill === 'none' ? null : new Date(period.start).toISOString(),
    resetsAt: period.end === null ? null : new Date(period.end).toISOString(),
  }
}
