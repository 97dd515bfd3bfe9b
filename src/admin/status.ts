import type { AdminContext } from './context.ts'

/**
 * The status view: store readiness (the same rule as `/readyz`), key sources, the Postgres
 * change feed, request and failure rates of the API listener over the last 5 minutes.
 */
export async function readStatus(ctx: AdminContext) {
  let store: 'ok' | 'unreachable' = 'ok'
  try {
    await ctx.store.ping()
  } catch {
    store = 'unreachable'
  }
  const keyStatus = ctx.issuers.keyStatus()
  // The /readyz grouping (server/health.ts): not loaded answer 503, stale ones still verify.
  const issuers = {
    remote: keyStatus.length,
    notLoaded: keyStatus.filter((s) => s.state === 'unavailable').map((s) => s.issuer),
    stale: keyStatus
      .filter((s) => s.state === 'stale' && s.failingSince !== null)
      .map((s) => s.issuer),
  }
  const feed = ctx.changeFeed()
  const rates = ctx.traffic.rates(300_000)
  const round = (n: number) => Math.round(n * 1000) / 1000
  return {
    status:
      store !== 'ok'
        ? 'unavailable'
        : issuers.notLoaded.length + issuers.stale.length > 0
          ? 'degraded'
          : 'ready',
    store,
    storeKind: ctx.store.kind,
    issuers,
    changeFeed:
      feed === undefined
        ? { state: 'not_needed', detail: 'SQLite: one process; other processes are polled' }
        : { state: feed.connected ? 'connected' : 'disconnected' },
    rates: {
      windowSeconds: 300,
      requestsPerSecond: round(rates.requests),
      failuresPerSecond: round(rates.failures),
    },
  }
}
