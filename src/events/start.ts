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

/**
 * Starts what the `events` configuration asks for. With a webhook: the outbox worker. Without
 * one: the outbox has no destination (every stored audit event is queued in it, see
 * `Store.appendAudit`), so it is emptied now and every minute, keeping it from growing.
 * All instances on one database must therefore agree on whether a webhook is configured.
 */
export function startEventDelivery(
  events: Readonly<Config['events']>,
  store: Store,
  clock: Clock,
  log: { warn(obj: object, msg: string): void },
): EventDelivery {
  if (events.webhookUrl === undefined || events.webhookSecret === undefined) {
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
