/**
 * Percentiles of a latency sample, the same for every load generator (hey, the paced one):
 * nearest rank over the sorted sample, so p99.9 of 3,000 answers is the third slowest.
 */

export interface LatencySummary {
  /** 2xx answers measured. */
  readonly count: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly p999Ms: number
  readonly maxMs: number
}

/** Nearest-rank percentile (`p` in 0..100) of an ascending sample; NaN when it is empty. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN
  // The epsilon keeps 99.9 % of 1,000 at rank 999 (0.999 × 1000 is 999.0000000000001).
  const rank = Math.ceil((p * sorted.length) / 100 - 1e-9)
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number
}

/** p50 / p99 / p99.9 / max of latencies in ms (the array is sorted in place). */
export function summarize(latenciesMs: Float64Array): LatencySummary {
  latenciesMs.sort()
  return {
    count: latenciesMs.length,
    p50Ms: percentile(latenciesMs, 50),
    p99Ms: percentile(latenciesMs, 99),
    p999Ms: percentile(latenciesMs, 99.9),
    maxMs: latenciesMs.length === 0 ? Number.NaN : (latenciesMs.at(-1) as number),
  }
}

/**
 * Median of a few numbers (per-round figures), the mean of the two middle ones for an even
 * count; NaN values (a round without its pair) are left out; NaN when none are left.
 */
export function median(values: readonly number[]): number {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b)
  if (sorted.length === 0) return Number.NaN
  const mid = sorted.length >> 1
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}
