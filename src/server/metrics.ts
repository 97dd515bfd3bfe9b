/**
 * Prometheus metrics, served at `/metrics` on a listener of their own.
 *
 * Why a separate listener and not a route on the API port: metrics reveal traffic shape,
 * tenants' error rates and cache sizes, and the API port faces the internet. The metrics
 * listener is plain HTTP without authentication, off by default, and binds 127.0.0.1 unless
 * the operator says otherwise (config `metrics`); scrape it from the host or a private
 * network. No label ever holds a token, a fingerprint, a tenant id or a client address:
 * labels are bounded sets (outcome codes, token types, statuses, policy names, and the
 * operator-registered issuer identifiers).
 *
 * Each app gets its own `Registry` (never prom-client's global one), so several servers in
 * one process (tests, embedding) do not collide.
 */
import type { AddressInfo } from 'node:net'
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'
import type { OutcomeMetrics } from '../auth/outcome-recorder.ts'
import type { JwksStatus } from '../core/jwks.ts'
import type { Clock } from '../core/ports.ts'
import type { ConnectionBudget } from '../lib/connection-budget.ts'
import type { CacheStats } from '../stores/cached-lookups.ts'
import type { OutboxStats } from '../stores/store.ts'
import type { AuditWriterStats } from '../stores/write-behind.ts'
import { listenForMetrics } from './metrics-http.ts'

/** What the metrics read at scrape time; every source is optional. */
export interface MetricsSources {
  readonly clock: Clock
  readonly lookupCache?: { stats(): CacheStats } | undefined
  readonly audit?: { stats(): AuditWriterStats } | undefined
  readonly jwks?: { keyStatus(): readonly JwksStatus[] } | undefined
  readonly outbox?: (() => Promise<OutboxStats>) | undefined
  readonly webhook?:
    | { stats(): { delivered: number; failedAttempts: number; consecutiveFailures: number } }
    | undefined
  /** Postgres change feed: whether cross-instance invalidation is live. */
  readonly changeFeed?: (() => { connected: boolean } | undefined) | undefined
  /** Whether the store's writes succeed (stores/write-health.ts). */
  readonly storeWrites?:
    | (() => { failing: boolean; failures: number; episodes: number })
    | undefined
}

/**
 * The registry, and the outcome metrics the one recorder writes (auth/outcome-recorder.ts):
 * the authentication-latency histogram and the answers by outcome code and status.
 */
export interface Metrics extends OutcomeMetrics {
  readonly registry: Registry
  /** One SET a CAEP/SSF receiver handled (ssf/receiver.ts), by receiver name and outcome. */
  countSsfEvent(receiver: string, outcome: string): void
}

/**
 * Creates the registry with every tokengate metric.
 *
 * @example
 * const metrics = createMetrics({ clock, lookupCache: auth.lookups, audit: auth.audit })
 * const listener = await startMetricsListener(metrics, '127.0.0.1', 9464)
 */
export function createMetrics(sources: MetricsSources): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry, prefix: 'tokengate_' })
  const registers = [registry]

  const requests = new Counter({
    name: 'tokengate_http_requests_total',
    help: 'Responses under /api/v1 by outcome code (ok, or the problem code) and status.',
    labelNames: ['code', 'status'] as const,
    registers,
  })
  const decisions = new Counter({
    name: 'tokengate_decisions_total',
    help: 'Forward-auth decisions by outcome code (ok, or the problem code) and status.',
    labelNames: ['code', 'status'] as const,
    registers,
  })
  const rateLimited = new Counter({
    name: 'tokengate_rate_limit_rejections_total',
    help: 'Requests answered 429 by the rate limiter, by policy (per-token, per-tenant, failed-auth).',
    labelNames: ['policy'] as const,
    registers,
  })
  const ssfEvents = new Counter({
    name: 'tokengate_ssf_events_total',
    help: 'SETs handled by each CAEP/SSF receiver (ssf.receivers[].name), by outcome: received, refused, replayed (received before), unavailable (keys or store down; delivered again).',
    labelNames: ['receiver', 'outcome'] as const,
    registers,
  })
  const authDuration = new Histogram({
    name: 'tokengate_auth_duration_seconds',
    help: 'Time to authenticate one request (header parsing to principal or failure).',
    labelNames: ['token_type', 'outcome'] as const,
    buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5],
    registers,
  })

  const cache = sources.lookupCache
  if (cache) {
    counterFrom(
      registry,
      'tokengate_lookup_cache_hits_total',
      'PAT/tenant lookups answered from the in-process cache.',
      () => cache.stats().hits,
    )
    counterFrom(
      registry,
      'tokengate_lookup_cache_misses_total',
      'PAT/tenant lookups that went to the store.',
      () => cache.stats().misses,
    )
    counterFrom(
      registry,
      'tokengate_lookup_cache_stale_total',
      'Tenant lookups answered from last-known state during a store outage.',
      () => cache.stats().stale,
    )
    gaugeFrom(
      registry,
      'tokengate_lookup_cache_entries',
      'Entries held by the PAT/tenant cache.',
      () => cache.stats().size,
    )
    gaugeFrom(
      registry,
      'tokengate_lookup_cache_hit_ratio',
      'hits / (hits + misses) since start (0 before any lookup).',
      () => {
        const { hits, misses } = cache.stats()
        return hits + misses === 0 ? 0 : hits / (hits + misses)
      },
    )
  }
  const audit = sources.audit
  if (audit) {
    gaugeFrom(
      registry,
      'tokengate_audit_queue_events',
      'Audit events waiting in memory to be written.',
      () => audit.stats().queued,
    )
    counterFrom(
      registry,
      'tokengate_audit_dropped_total',
      'Audit events refused because the in-memory queue was full (store outage).',
      () => audit.stats().dropped,
    )
  }
  const jwks = sources.jwks
  if (jwks) {
    new Gauge({
      name: 'tokengate_jwks_key_age_seconds',
      help: 'Seconds since the issuer’s JWKS was last fetched successfully (absent: never).',
      labelNames: ['issuer'] as const,
      registers,
      collect() {
        this.reset()
        const now = sources.clock.now()
        for (const s of jwks.keyStatus()) {
          if (s.loadedAt !== null) this.set({ issuer: s.issuer }, (now - s.loadedAt) / 1000)
        }
      },
    })
    new Gauge({
      name: 'tokengate_jwks_state',
      help: '1 for the key state each remote issuer is in: fresh, stale (past max age, still verifying) or unavailable (503).',
      labelNames: ['issuer', 'state'] as const,
      registers,
      collect() {
        this.reset()
        for (const s of jwks.keyStatus()) {
          for (const state of ['fresh', 'stale', 'unavailable'] as const) {
            this.set({ issuer: s.issuer, state }, s.state === state ? 1 : 0)
          }
        }
      },
    })
  }
  const outbox = sources.outbox
  if (outbox) {
    new Gauge({
      name: 'tokengate_events_outbox_pending',
      help: 'Audit events waiting for webhook delivery (in the store).',
      registers,
      async collect() {
        this.set((await outbox()).pending)
      },
    })
    new Gauge({
      name: 'tokengate_events_outbox_oldest_age_seconds',
      help: 'Age of the oldest event waiting for webhook delivery (0 when none waits).',
      registers,
      async collect() {
        const { oldestTime } = await outbox()
        this.set(oldestTime === null ? 0 : (sources.clock.now() - oldestTime) / 1000)
      },
    })
  }
  const webhook = sources.webhook
  if (webhook) {
    counterFrom(
      registry,
      'tokengate_events_delivered_total',
      'Events delivered to the webhook (2xx).',
      () => webhook.stats().delivered,
    )
    counterFrom(
      registry,
      'tokengate_events_delivery_failures_total',
      'Webhook delivery attempts that failed (retried).',
      () => webhook.stats().failedAttempts,
    )
  }
  const feed = sources.changeFeed
  if (feed) {
    new Gauge({
      name: 'tokengate_change_feed_connected',
      help: '1 while Postgres LISTEN/NOTIFY delivers other instances’ revocations (Postgres only).',
      registers,
      collect() {
        const status = feed()
        if (status) this.set(status.connected ? 1 : 0)
      },
    })
  }

  const writes = sources.storeWrites
  if (writes) {
    gaugeFrom(
      registry,
      'tokengate_store_writes_failing',
      '1 while store writes fail or the data directory is full (an episode; /readyz degraded).',
      () => (writes().failing ? 1 : 0),
    )
    counterFrom(
      registry,
      'tokengate_store_write_failures_total',
      'Store writes (audit events, usage counts, last-used times) that failed and wait to be retried.',
      () => writes().failures,
    )
  }

  return {
    registry,
    observeAuthentication(tokenType, code, seconds) {
      authDuration.observe({ token_type: tokenType, outcome: code }, seconds)
    },
    countSsfEvent(receiver, outcome) {
      ssfEvents.inc({ receiver, outcome })
    },
    countAnswer(listener, code, status, limit) {
      const counter = listener === 'decision' ? decisions : requests
      counter.inc({ code, status: String(status) })
      if (status === 429) rateLimited.inc({ policy: limit ?? 'unknown' })
    },
  }
}

/** A counter whose value is read from a monotonic source at scrape time. */
function counterFrom(registry: Registry, name: string, help: string, read: () => number): void {
  new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      this.reset()
      this.inc(read())
    },
  })
}

function gaugeFrom(registry: Registry, name: string, help: string, read: () => number): void {
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      this.set(read())
    },
  })
}

export interface MetricsListener {
  /** e.g. `http://127.0.0.1:9464/metrics` */
  readonly url: string
  close(): Promise<void>
}

/** This process's registry on its own `/metrics` listener (metrics-http.ts). */
export async function startMetricsListener(
  metrics: Metrics,
  host: string,
  port: number,
  connections?: ConnectionBudget,
): Promise<MetricsListener> {
  const server = await listenForMetrics(
    { contentType: metrics.registry.contentType, collect: () => metrics.registry.metrics() },
    host,
    port,
    connections && ((socket) => connections.admit(socket)),
  )
  const address = server.address() as AddressInfo
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address
  return {
    url: `http://${shown}:${address.port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
