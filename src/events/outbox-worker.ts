/**
 * Delivers the store's event outbox to the webhook, in the background.
 *
 * Guarantees, and how:
 * - Never blocks a request: requests only queue audit events in memory (write-behind.ts);
 *   this loop runs on its own timers and its only shared resource is the store.
 * - Never loses an event: `appendAudit` queues each event in the outbox in the same
 *   transaction that stores it, and an entry is deleted only after a 2xx. A crash after the
 *   2xx but before the delete redelivers the batch: delivery is at-least-once, and each
 *   event carries its `id` for the receiver to drop duplicates.
 * - Survives a restart: the outbox lives in the store, so a new process (or another
 *   instance on Postgres) picks up whatever is pending. A claim is a lease: entries claimed
 *   by a process that died become claimable again when the lease ends.
 * - Backs off: a failed attempt defers its entries by an exponential delay with jitter
 *   (`retryInitialMs` doubling up to `retryMaxMs`, or the receiver's `Retry-After` when
 *   longer), and the loop itself waits as long before its next attempt, so a receiver that
 *   is down sees about one request per delay, not one per event.
 */
import { type Clock, systemClock } from '../core/ports.ts'
import type { OutboxStore } from '../stores/store.ts'
import type { WebhookSender } from './webhook.ts'

export interface OutboxWorkerOptions {
  readonly store: OutboxStore
  readonly sender: WebhookSender
  /** Which queue of the outbox this worker delivers: `''` (default) is the webhook's. */
  readonly destination?: string | undefined
  readonly clock?: Clock | undefined
  /** Events per delivery. Default 100. */
  readonly batchSize?: number | undefined
  /** Wait between polls while the outbox is empty, in ms. Default 1000. */
  readonly pollIntervalMs?: number | undefined
  /** First retry delay, in ms. Default 1000. */
  readonly retryInitialMs?: number | undefined
  /** Longest retry delay, in ms. Default 300,000 (5 min). */
  readonly retryMaxMs?: number | undefined
  /** How long a claim hides entries from other workers, in ms. Default 60,000. */
  readonly leaseMs?: number | undefined
  readonly log?: { warn(obj: object, msg: string): void } | undefined
  /** For tests: a number in [0, 1). Default Math.random. */
  readonly random?: (() => number) | undefined
}

export interface OutboxWorkerStats {
  /** Events delivered (2xx) since start. */
  readonly delivered: number
  /** Delivery attempts that failed since start. */
  readonly failedAttempts: number
  /** Failed attempts in a row right now (0 once one succeeds). */
  readonly consecutiveFailures: number
  /** Epoch ms of the last 2xx, or null. */
  readonly lastSuccessAt: number | null
}

export interface OutboxWorker {
  /** Starts the loop (idempotent). */
  start(): void
  /** Runs one claim-and-deliver step now; resolves with the number of events delivered. */
  runOnce(): Promise<number>
  /** Stops the loop and aborts a delivery in flight (its events stay queued). */
  close(): Promise<void>
  stats(): OutboxWorkerStats
}

/**
 * Creates the worker; call `start()` to run it.
 *
 * @example
 * const worker = createOutboxWorker({ store, sender: createWebhookSender({ url, secret,
 *   timeoutMs: 5000 }) })
 * worker.start()
 * await worker.close() // on shutdown
 */
export function createOutboxWorker(options: OutboxWorkerOptions): OutboxWorker {
  const { store, sender } = options
  const destination = options.destination ?? ''
  const clock = options.clock ?? systemClock
  const batchSize = options.batchSize ?? 100
  const pollIntervalMs = options.pollIntervalMs ?? 1000
  const retryInitialMs = options.retryInitialMs ?? 1000
  const retryMaxMs = Math.max(retryInitialMs, options.retryMaxMs ?? 300_000)
  const leaseMs = options.leaseMs ?? 60_000
  const random = options.random ?? Math.random
  const stats = {
    delivered: 0,
    failedAttempts: 0,
    consecutiveFailures: 0,
    lastSuccessAt: null as number | null,
  }
  const abort = new AbortController()
  let timer: NodeJS.Timeout | undefined
  let running: Promise<unknown> | undefined
  let started = false
  let closed = false

  /** Exponential with equal jitter: half the delay fixed, half random. */
  function backoff(attempt: number): number {
    const ceiling = Math.min(retryMaxMs, retryInitialMs * 2 ** Math.min(attempt - 1, 30))
    return Math.round(ceiling / 2 + random() * (ceiling / 2))
  }

  /** One step; returns the wait before the next one. Only store failures throw. */
  async function step(): Promise<{ delivered: number; waitMs: number }> {
    const entries = await store.claimOutbox(clock.now(), batchSize, leaseMs, destination)
    if (entries.length === 0) return { delivered: 0, waitMs: pollIntervalMs }
    const ids = entries.map((e) => e.event.id)
    const result = await sender.send(
      entries.map((e) => e.event),
      abort.signal,
    )
    if (result.ok) {
      await store.completeOutbox(ids, destination)
      stats.delivered += ids.length
      stats.consecutiveFailures = 0
      stats.lastSuccessAt = clock.now()
      // A full batch suggests more are waiting: go on at once.
      return { delivered: ids.length, waitMs: entries.length === batchSize ? 0 : pollIntervalMs }
    }
    stats.failedAttempts++
    stats.consecutiveFailures++
    const attempts = Math.max(...entries.map((e) => e.attempts)) + 1
    const delay = Math.max(
      backoff(Math.max(attempts, stats.consecutiveFailures)),
      result.retryAfterMs ?? 0,
    )
    // Released even on shutdown (the abort), so a restart retries at once.
    await store.retryOutbox(ids, clock.now() + (closed ? 0 : delay), result.error, destination)
    if (!closed) {
      options.log?.warn(
        {
          error: result.error,
          events: ids.length,
          attempts,
          retryInMs: delay,
          ...(destination ? { destination } : {}),
        },
        destination ? 'event delivery failed; will retry' : 'webhook delivery failed; will retry',
      )
    }
    return { delivered: 0, waitMs: delay }
  }

  function schedule(waitMs: number): void {
    if (closed) return
    timer = setTimeout(loop, waitMs)
    timer.unref()
  }

  function loop(): void {
    const run = step().then(
      ({ waitMs }) => schedule(waitMs),
      (error: unknown) => {
        // The store is unreachable: nothing was lost (the outbox is the store); try later.
        if (!closed) options.log?.warn({ err: error }, 'event outbox unavailable; will retry')
        schedule(backoff(++stats.consecutiveFailures))
      },
    )
    running = run
  }

  return {
    start() {
      if (started || closed) return
      started = true
      loop()
    },
    async runOnce() {
      return (await step()).delivered
    },
    async close() {
      closed = true
      clearTimeout(timer)
      abort.abort()
      await running?.catch(() => {})
    },
    stats: () => ({ ...stats }),
  }
}
