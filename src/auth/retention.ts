/**
 * Retention (issue #24): usage buckets are kept per resolution for as long as `usage.*Retention*`
 * says, the audit log for `audit.retentionDays` (0: forever), JWT revocation rules until they
 * expire (issue #34). Each instance prunes once a
 * minute after it starts and then hourly, in batches (short transactions: requests and
 * writes never wait long behind a delete); instances pruning at once delete disjoint or
 * already-deleted rows, which is harmless. An audit event still waiting in the webhook
 * outbox is never deleted before it is delivered.
 */
import type { Config } from '../config/schema.ts'
import type { Clock } from '../core/ports.ts'
import type {
  AuditStore,
  JwtRevocationStore,
  UsageResolution,
  UsageStore,
} from '../stores/store.ts'

const HOUR_MS = 3_600_000
const DAY_MS = 86_400_000
const BATCH = 5_000
const FIRST_RUN_MS = 60_000
const INTERVAL_MS = HOUR_MS

export interface RetentionSettings {
  readonly usage: Readonly<Config['usage']>
  readonly audit: Readonly<Config['audit']>
}

export interface Pruned {
  readonly usage: Readonly<Record<UsageResolution, number>>
  readonly audit: number
  /** JWT revocation rules past their expiry (no token they could match is valid any more). */
  readonly jwtRevocations: number
}

/** Deletes everything older than its retention now; returns how many rows of each. */
export async function pruneExpired(
  store: Pick<UsageStore, 'pruneUsage'> &
    Pick<AuditStore, 'pruneAudit'> &
    Partial<Pick<JwtRevocationStore, 'pruneJwtRevocations'>>,
  settings: RetentionSettings,
  now: number,
): Promise<Pruned> {
  const keep: Readonly<Record<UsageResolution, number>> = {
    minute: settings.usage.minuteRetentionHours * HOUR_MS,
    hour: settings.usage.hourRetentionDays * DAY_MS,
    day: settings.usage.dayRetentionDays * DAY_MS,
  }
  const usage = { minute: 0, hour: 0, day: 0 }
  for (const resolution of ['minute', 'hour', 'day'] as const) {
    usage[resolution] = await inBatches((limit) =>
      store.pruneUsage(resolution, now - keep[resolution], limit),
    )
  }
  const days = settings.audit.retentionDays
  const audit =
    days === 0 ? 0 : await inBatches((limit) => store.pruneAudit(now - days * DAY_MS, limit))
  const prune = store.pruneJwtRevocations?.bind(store)
  const jwtRevocations = prune ? await inBatches((limit) => prune(now, limit)) : 0
  return { usage, audit, jwtRevocations }
}

async function inBatches(prune: (limit: number) => Promise<number>): Promise<number> {
  let total = 0
  for (;;) {
    const deleted = await prune(BATCH)
    total += deleted
    if (deleted < BATCH) return total
  }
}

export interface RetentionLog {
  info(fields: object, message: string): void
  warn(fields: object, message: string): void
}

/** Prunes a minute after start and hourly after that (unref'd timers); `close` stops it. */
export function startRetention(
  store: Parameters<typeof pruneExpired>[0],
  settings: RetentionSettings,
  clock: Clock,
  log: RetentionLog,
): { close(): Promise<void> } {
  let running: Promise<void> | undefined
  let timer: NodeJS.Timeout | undefined
  const run = () => {
    running ??= pruneExpired(store, settings, clock.now())
      .then(
        (pruned) => {
          const total =
            pruned.audit +
            pruned.usage.minute +
            pruned.usage.hour +
            pruned.usage.day +
            pruned.jwtRevocations
          if (total > 0)
            log.info(
              { pruned },
              'retention: deleted expired usage buckets, audit events and JWT revocation rules',
            )
        },
        (error: unknown) => log.warn({ err: error }, 'retention: pruning failed; will retry'),
      )
      .finally(() => {
        running = undefined
      })
  }
  timer = setTimeout(() => {
    run()
    timer = setInterval(run, INTERVAL_MS)
    timer.unref()
  }, FIRST_RUN_MS)
  timer.unref()
  return {
    async close() {
      clearTimeout(timer)
      clearInterval(timer)
      await running
    },
  }
}
