import { issuerReadiness } from '../auth/issuer-registry.ts'
import { readUsageSeries, type UsageSeries } from '../auth/usage.ts'
import type { AdminContext } from './context.ts'

const RATE_WINDOW_MINUTES = 5

/**
 * The status view. Cluster-wide: the store (every instance uses the same one) and the
 * requests of every instance by outcome, from the usage counts in the store (the last hour
 * per minute; rates over the last five complete minutes). Of this instance: its change feed
 * and its issuers' key sources (the `/readyz` grouping).
 */
export async function readStatus(
  ctx: Pick<AdminContext, 'store' | 'issuers' | 'changeFeed' | 'clock' | 'config'>,
) {
  let store: 'ok' | 'unreachable' = 'ok'
  try {
    await ctx.store.ping()
  } catch {
    store = 'unreachable'
  }
  // The /readyz grouping: not loaded answer 503, stale ones still verify, skipped keys 401.
  const { view: issuers, degraded } = issuerReadiness(ctx.issuers)
  const feed = ctx.changeFeed()
  const traffic = store === 'ok' && ctx.config.usage.enabled ? await clusterTraffic(ctx) : undefined
  return {
    status: store !== 'ok' ? 'unavailable' : degraded ? 'degraded' : 'ready',
    store,
    storeKind: ctx.store.kind,
    issuers,
    changeFeed:
      feed === undefined
        ? { state: 'not_needed', detail: 'SQLite: one process; other processes are polled' }
        : { state: feed.connected ? 'connected' : 'disconnected' },
    rates: traffic?.rates ?? {
      scope: 'cluster' as const,
      windowSeconds: RATE_WINDOW_MINUTES * 60,
      requestsPerSecond: null,
      failuresPerSecond: null,
    },
    usage: ctx.config.usage.enabled ? 'on' : 'off',
    series: traffic?.series,
  }
}

async function clusterTraffic(ctx: Pick<AdminContext, 'store' | 'clock'>) {
  const series: UsageSeries = await readUsageSeries(
    ctx.store,
    'all',
    '',
    { resolution: 'minute' },
    ctx.clock.now(),
  )
  // The last five minute buckets, the current (partly counted) one included.
  const complete = series.points.slice(-RATE_WINDOW_MINUTES)
  let requests = 0
  let failures = 0
  for (const p of complete) {
    requests += p.allowed + p.unauthorized + p.forbidden + p.limited
    failures += p.unauthorized + p.forbidden + p.limited
  }
  const seconds = RATE_WINDOW_MINUTES * 60
  const round = (n: number) => Math.round(n * 1000) / 1000
  return {
    series,
    rates: {
      scope: 'cluster' as const,
      windowSeconds: seconds,
      requestsPerSecond: round(requests / seconds),
      failuresPerSecond: round(failures / seconds),
    },
  }
}
