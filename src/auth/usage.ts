/**
 * Reading usage (issue #24): the requests of a key, a tenant or the whole cluster by outcome,
 * per minute, hour or day, as every instance's write-behind added them to the store. The CLI,
 * the admin API, the console's charts and its status page all read through here.
 */
import type {
  UsageCounts,
  UsageQuery,
  UsageResolution,
  UsageScope,
  UsageStore,
} from '../stores/store.ts'
import { USAGE_OUTCOMES } from '../stores/usage-counts.ts'
import { OperationRefused } from './operations.ts'

export const USAGE_RESOLUTIONS: readonly UsageResolution[] = ['minute', 'hour', 'day']

/** Bucket length of each resolution, in ms. */
export const RESOLUTION_MS: Readonly<Record<UsageResolution, number>> = {
  minute: 60_000,
  hour: 3_600_000,
  day: 86_400_000,
}

/** The range read when none is given: an hour of minutes, two days of hours, 30 days. */
const DEFAULT_BUCKETS: Readonly<Record<UsageResolution, number>> = {
  minute: 60,
  hour: 48,
  day: 30,
}

/** The most buckets one read returns (a day of minutes, 93 days of hours, 10 years of days). */
const MAX_BUCKETS: Readonly<Record<UsageResolution, number>> = {
  minute: 1_440,
  hour: 2_232,
  day: 3_660,
}

/** One bucket of a series, empty buckets included. */
export interface UsagePoint extends UsageCounts {
  /** Epoch ms. */
  readonly start: number
}

export interface UsageSeries {
  readonly scope: UsageScope
  readonly subject: string
  readonly resolution: UsageResolution
  /** Epoch ms, inclusive. */
  readonly since: number
  /** Epoch ms, exclusive. */
  readonly until: number
  readonly points: readonly UsagePoint[]
  readonly totals: UsageCounts
}

export interface UsageRange {
  readonly resolution?: UsageResolution | undefined
  readonly since?: number | undefined
  readonly until?: number | undefined
}

/**
 * The whole range asked for, in buckets: `until` defaults to the end of the current bucket,
 * `since` to the default count of buckets before it; both are aligned to bucket starts.
 * Refused (`invalid_input`) when reversed or longer than the resolution allows.
 */
export function usageRange(range: UsageRange, now: number): Omit<UsageQuery, 'scope' | 'subject'> {
  const resolution = range.resolution ?? 'minute'
  if (!USAGE_RESOLUTIONS.includes(resolution)) {
    throw new OperationRefused(
      'invalid_input',
      'resolution',
      `resolution: ${JSON.stringify(resolution)} is not valid; expected minute, hour or day`,
    )
  }
  const length = RESOLUTION_MS[resolution]
  const until = Math.ceil((range.until ?? now + 1) / length) * length
  const since =
    Math.floor((range.since ?? until - DEFAULT_BUCKETS[resolution] * length) / length) * length
  if (!(since < until)) {
    throw new OperationRefused('invalid_input', 'since', 'since: must be before until')
  }
  if ((until - since) / length > MAX_BUCKETS[resolution]) {
    throw new OperationRefused(
      'invalid_input',
      'since',
      `since: the range is longer than ${MAX_BUCKETS[resolution]} ${resolution} buckets; use a coarser resolution`,
    )
  }
  return { resolution, since, until }
}

/** A subject's series over the range, every bucket present (zeros where none was counted). */
export async function readUsageSeries(
  store: Pick<UsageStore, 'readUsage'>,
  scope: UsageScope,
  subject: string,
  range: UsageRange,
  now: number,
): Promise<UsageSeries> {
  const { resolution, since, until } = usageRange(range, now)
  const rows = await store.readUsage({ scope, subject, resolution, since, until })
  const byStart = new Map(rows.map((row) => [row.bucketStart, row]))
  const length = RESOLUTION_MS[resolution]
  const points: UsagePoint[] = []
  const totals = { allowed: 0, unauthorized: 0, forbidden: 0, limited: 0 }
  for (let start = since; start < until; start += length) {
    const row = byStart.get(start)
    const point = {
      start,
      allowed: row?.allowed ?? 0,
      unauthorized: row?.unauthorized ?? 0,
      forbidden: row?.forbidden ?? 0,
      limited: row?.limited ?? 0,
    }
    for (const outcome of USAGE_OUTCOMES) totals[outcome] += point[outcome]
    points.push(point)
  }
  return { scope, subject, resolution, since, until, points, totals }
}

/** A series as CSV (RFC 4180): one row per bucket, ISO 8601 start times. */
export function usageCsv(series: UsageSeries): string {
  const header = 'start,resolution,scope,subject,allowed,unauthorized,forbidden,limited'
  const subject = /^[=+\-@\t\r]/.test(series.subject) ? `'${series.subject}` : series.subject
  const quoted = /[",\r\n]/.test(subject) ? `"${subject.replace(/"/g, '""')}"` : subject
  const rows = series.points.map((p) =>
    [
      new Date(p.start).toISOString(),
      series.resolution,
      series.scope,
      quoted,
      p.allowed,
      p.unauthorized,
      p.forbidden,
      p.limited,
    ].join(','),
  )
  return `${[header, ...rows].join('\r\n')}\r\n`
}

/** A series as JSON output shows it. */
export function usageView(series: UsageSeries) {
  return {
    scope: series.scope,
    subject: series.subject,
    resolution: series.resolution,
    since: new Date(series.since).toISOString(),
    until: new Date(series.until).toISOString(),
    totals: series.totals,
    points: series.points.map((p) => ({ ...p, start: new Date(p.start).toISOString() })),
  }
}
