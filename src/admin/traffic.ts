/**
 * Request outcomes of the API listener over the last hour, in 10-second buckets, for the
 * console's status chart. Counts only: no paths, tokens, tenants or addresses.
 */
export const TRAFFIC_SERIES = ['ok', 'unauthorized', 'forbidden', 'limited', 'error'] as const
export type TrafficSeries = (typeof TRAFFIC_SERIES)[number]

export interface TrafficBucket {
  /** Start of the bucket, epoch ms. */
  readonly start: number
  readonly counts: Readonly<Record<TrafficSeries, number>>
}

export interface TrafficRecorder {
  record(status: number): void
  /** Buckets from oldest to newest, ending with the current one; empty buckets included. */
  buckets(): readonly TrafficBucket[]
  /** Requests and failures (401/403/429/5xx) per second over the last `windowMs`. */
  rates(windowMs: number): { requests: number; failures: number }
}

export const BUCKET_MS = 10_000
const BUCKETS = 360

function seriesOf(status: number): TrafficSeries {
  if (status === 401) return 'unauthorized'
  if (status === 403) return 'forbidden'
  if (status === 429) return 'limited'
  if (status >= 500) return 'error'
  return 'ok'
}

const zero = (): Record<TrafficSeries, number> => ({
  ok: 0,
  unauthorized: 0,
  forbidden: 0,
  limited: 0,
  error: 0,
})

export function createTrafficRecorder(clock: { now(): number }): TrafficRecorder {
  const counts = new Map<number, Record<TrafficSeries, number>>()
  const bucketOf = (t: number) => Math.floor(t / BUCKET_MS) * BUCKET_MS
  return {
    record(status) {
      const start = bucketOf(clock.now())
      let bucket = counts.get(start)
      if (!bucket) {
        bucket = zero()
        counts.set(start, bucket)
        for (const old of counts.keys()) {
          if (old <= start - BUCKETS * BUCKET_MS) counts.delete(old)
          else break
        }
      }
      bucket[seriesOf(status)]++
    },
    buckets() {
      const newest = bucketOf(clock.now())
      const out: TrafficBucket[] = []
      for (let start = newest - (BUCKETS - 1) * BUCKET_MS; start <= newest; start += BUCKET_MS) {
        out.push({ start, counts: counts.get(start) ?? zero() })
      }
      return out
    },
    rates(windowMs) {
      const since = clock.now() - windowMs
      let requests = 0
      let failures = 0
      for (const [start, bucket] of counts) {
        if (start + BUCKET_MS <= since) continue
        for (const series of TRAFFIC_SERIES) {
          requests += bucket[series]
          if (series !== 'ok') failures += bucket[series]
        }
      }
      return { requests: requests / (windowMs / 1000), failures: failures / (windowMs / 1000) }
    },
  }
}
