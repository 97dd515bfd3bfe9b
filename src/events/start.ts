import type { Config } from '../config/schema.ts'
import type { Clock } from '../core/ports.ts'
import type { Store } from '../stores/store.ts'
import { createOutboxWorker, type OutboxWorker } from './outbox-worker.ts'
import { createWebhookSender } from './webhook.ts'

/** How often the outbox is emptied when no webhook is configured, in ms. */
const CLEAR_INTERVAL_MS = 60_000

export interface EventDelivery {
  /** The running worker, when `events.webhookUrl` is set. */
  readonly worker: OutboxWorker | undefined
  /** Stops delivery; pending events stay in the store for the next start. */
  close(): Promise<void>
}

type WebhookEvents = Readonly<Config['events']> & {
  readonly webhookUrl: string
  readonly webhookSecret: string
}

/**
 * Whether audit events are delivered to a webhook: both its URL and its secret are set. The
 * audit writer queues events in the outbox exactly when this holds (see `createAuthContext`).
 */
export function webhookConfigured(events: Readonly<Config['events']>): events is WebhookEvents {
  return events.webhookUrl !== undefined && events.webhookSecret !== undefined
}

/**
 * Starts what the `events` configuration asks for. With a webhook: the outbox worker. Without
 * one: the server's audit writer queues nothing, but the outbox may still hold entries that
 * nothing will deliver: left by an earlier run that had a webhook, or queued by the CLI
 * (which does not read the events configuration and queues by default). So it is emptied now
 * and every minute, keeping it from growing. All instances on one database must therefore
 * agree on whether a webhook is configured.
 */
export function startEventDelivery(
  events: Readonly<Config['events']>,
  store: Store,
  clock: Clock,
  log: { warn(obj: object, msg: string): void },
): EventDelivery {
  if (!webhookConfigured(events)) {
    const clear = () => {
      store.clearOutbox().catch((error: unknown) => {
        log.warn({ err: error }, 'emptying the event outbox failed; will retry')
      })
    }
    clear()
    const timer = setInterval(clear, CLEAR_INTERVAL_MS)
    timer.unref()
    return {
      worker: undefined,
      async close() {
        clearInterval(timer)
      },
    }
  }
  const sender = createWebhookSender({
    url: events.webhookUrl,
    secret: events.webhookSecret,
    timeoutMs: events.timeoutMs,
    clock,
  })
  const worker = createOutboxWorker({
    store,
    sender,
    clock,
    batchSize: events.batchSize,
    pollIntervalMs: events.pollIntervalMs,
    retryInitialMs: events.retryInitialMs,
    retryMaxMs: events.retryMaxMs,
    // Longer than any one attempt, so a live worker's claim never expires mid-delivery.
    leaseMs: events.timeoutMs * 2 + 30_000,
    log,
  })
  worker.start()
  return { worker, close: () => worker.close() }
}
