/**
 * Write-behind for the two writes the request path causes: a PAT's last-used time and audit
 * events. The request only touches memory (O(1), no I/O); a timer writes batches, and
 * `close()` writes what is left, so a graceful shutdown loses nothing.
 *
 * A failed write keeps its data for the next attempt. Timers are unref()'d: they never keep
 * the process alive on their own.
 */
import * as crypto from 'node:crypto'
import { type Clock, systemClock } from '../core/ports.ts'
import { fitSlots, KeyedSlots } from '../lib/keyed-slots.ts'
import type { Store, StoredAuditEvent } from './store.ts'

/** Called when a timer-driven flush fails (the data is kept and retried). */
export type FlushErrorHandler = (error: unknown) => void

export interface PatUseRecorderOptions {
  /** Interval between flushes, in ms. Default 1000; 0 disables the timer (flush by hand). */
  readonly flushIntervalMs?: number | undefined
  /** Supplies `at` when `record` is called without it. */
  readonly clock?: Clock | undefined
  /** Default: a process warning, at most one a minute. */
  readonly onError?: FlushErrorHandler | undefined
  /**
   * A use less than this many ms after the last one kept for the same token is dropped, so a
   * token's stored last-used time is at most this much older than its real last use.
   * Default 0: every use is kept (and coalesced per flush).
   */
  readonly resolutionMs?: number | undefined
}

export interface PatUseRecorder {
  /** Notes that token `id` was used at `at` (epoch ms, default now). Memory only, O(1). */
  record(id: string, at?: number): void
  /** Writes everything recorded so far; rejects (keeping the data) when the store fails. */
  flush(): Promise<void>
  /** Stops the timer and flushes. Later `record` calls are kept for an explicit `flush()`. */
  close(): Promise<void>
  /** Tokens waiting to be written. */
  pending(): number
}

/**
 * Coalesces last-used times per token (only the latest survives) and writes them with
 * `store.recordPatUse` every `flushIntervalMs`. Memory is bounded by the number of distinct
 * tokens used between two successful flushes, which is at most the number of tokens issued.
 *
 * @example
 *   const patUse = createPatUseRecorder(store, { flushIntervalMs: 1000 })
 *   patUse.record(principal.tokenId)   // on every authenticated PAT request
 *   await patUse.close()               // on shutdown
 */
export function createPatUseRecorder(
  store: Pick<Store, 'recordPatUse'>,
  options: PatUseRecorderOptions = {},
): PatUseRecorder {
  const clock = options.clock ?? systemClock
  const resolutionMs = options.resolutionMs ?? 0
  let pending = new Map<string, number>()
  // The last use kept per token, for `resolutionMs`. Why: with many tokens each in steady use,
  // keeping every use meant one UPDATE per token per flush, i.e. close to one store write per
  // request; at a minute's resolution a busy token costs one write a minute. Bounded: when
  // full it starts over, which at worst keeps one more use per token. Ids are held in typed
  // arrays (`KeyedSlots`) and times as ms after `keptSince` in an Int32Array at the id's slot:
  // no heap string, Map entry or boxed epoch-ms double for each of up to MAX_KEPT_TOKENS tokens.
  const kept = new KeyedSlots(MAX_KEPT_TOKENS, PAT_ID_LENGTH)
  let keptOffsets = new Int32Array(0)
  let keptSince = clock.now() - KEPT_OFFSET_MARGIN_MS

  const keepLatest = (id: string, at: number) => {
    const known = pending.get(id)
    if (known === undefined || at > known) pending.set(id, at)
    runner.due()
  }

  const runner = createFlushRunner(
    async () => {
      if (pending.size === 0) return
      const batch = pending
      pending = new Map()
      try {
        await store.recordPatUse(batch)
      } catch (error) {
        // Put the batch back, merged with what was recorded meanwhile.
        for (const [id, at] of batch) keepLatest(id, at)
        throw error
      }
    },
    options.flushIntervalMs ?? 1000,
    options.onError,
    () => pending.size > 0,
  )

  return {
    record(id, at = clock.now()) {
      if (resolutionMs > 0) {
        let offset = at - keptSince
        let slot = kept.find(id)
        if (slot !== -1) {
          const last = keptOffsets[slot] as number
          if (offset >= last && offset - last < resolutionMs) return
        }
        // Full: only a token not held needs room (one held, and due, keeps its slot).
        const full = slot === -1 && kept.size >= MAX_KEPT_TOKENS
        if (full || !(offset >= 0 && offset < MAX_KEPT_OFFSET_MS)) {
          kept.clear()
          keptOffsets = new Int32Array(0)
          keptSince = at - KEPT_OFFSET_MARGIN_MS
          offset = KEPT_OFFSET_MARGIN_MS
          slot = -1
        }
        if (slot === -1) {
          slot = kept.add(id)
          keptOffsets = fitSlots(keptOffsets, kept)
        }
        keptOffsets[slot] = offset
      }
      keepLatest(id, at)
    },
    flush: runner.flush,
    close: runner.close,
    pending: () => pending.size,
  }
}

/** A PAT id's length (`tok_` + 20, core/pat.ts): the kept ids are stored inline at this width. */
const PAT_ID_LENGTH = 24

/** Tokens whose last kept use `createPatUseRecorder` remembers (~6 MB at most, off the V8 heap). */
const MAX_KEPT_TOKENS = 100_000

/**
 * Kept times are offsets in [0, 2^30) ms (V8's small integers, ~12 days), starting in the
 * middle so that uses recorded a little out of order never start over; outside, start over.
 */
const MAX_KEPT_OFFSET_MS = 2 ** 30
const KEPT_OFFSET_MARGIN_MS = 2 ** 29

/** An audit event as the caller writes it: `id` and `time` are assigned when missing. */
export type AuditEventInput = Omit<StoredAuditEvent, 'id' | 'time'> &
  Partial<Pick<StoredAuditEvent, 'id' | 'time'>>

export interface AuditWriterOptions {
  /** Interval between flushes, in ms. Default 200; 0 disables the timer. */
  readonly flushIntervalMs?: number | undefined
  /** Events per `appendAudit` call; a full batch also starts a flush at once. Default 500. */
  readonly maxBatch?: number | undefined
  /** Events held in memory while the store is failing. Default 100,000. */
  readonly maxQueue?: number | undefined
  /**
   * Whether events are also queued for webhook delivery (`appendAudit`'s `queue`). Default
   * true; pass false when no webhook is configured, so that every audited request (a flood
   * of 401s included) skips the outbox insert and its two index updates.
   */
  readonly queueForDelivery?: boolean | undefined
  /** With `queueForDelivery`: whether the webhook's queue gets them too (default true). */
  readonly queueForWebhook?: boolean | undefined
  /** Assigns `time` to events written without one. */
  readonly clock?: Clock | undefined
  /** Default: a process warning, at most one a minute. */
  readonly onError?: FlushErrorHandler | undefined
  /**
   * Each event is also appended here before `write` returns, and dropped from it once
   * stored (audit-spool.ts): a process killed between flushes loses nothing.
   */
  readonly spool?: AuditSpool | undefined
  /**
   * Stores what killed processes left in the spool directory: a recovery the store refused at
   * start (audit-spool.ts), tried again after each flush that stored, until it succeeds
   * (`createFlushRunner`'s `leftover`).
   */
  readonly recoverSpool?: (() => Promise<unknown>) | undefined
}

export interface AuditWriterStats {
  /** Events waiting to be written. */
  readonly queued: number
  /** Events refused since start because the queue was full. */
  readonly dropped: number
}

export interface AuditWriter {
  /** Queues one event (memory only). Never throws for a store problem. */
  write(event: AuditEventInput): void
  /** Writes every queued event; rejects (keeping the rest queued) when the store fails. */
  flush(): Promise<void>
  /** Stops the timer and flushes. Later `write` calls are kept for an explicit `flush()`. */
  close(): Promise<void>
  stats(): AuditWriterStats
}

/**
 * Queues audit events and appends them in batches of at most `maxBatch`, in order.
 *
 * Nothing is lost while the store is briefly down: a failed batch stays at the head of the
 * queue and is retried (stores skip event ids they already hold, so a retried batch that did
 * commit is not duplicated). A long outage would grow the queue without limit, so it is
 * bounded by `maxQueue`: once full, NEW events are refused and counted in `stats().dropped`.
 * Refusing the newest keeps memory bounded and preserves the beginning of the incident;
 * the gap itself is then recorded as an `audit.dropped` event (details: `{ count }`) once
 * the store accepts writes again, so the audit trail shows that it is incomplete.
 */
export function createAuditWriter(
  store: Pick<Store, 'appendAudit'>,
  options: AuditWriterOptions = {},
): AuditWriter {
  const clock = options.clock ?? systemClock
  const maxBatch = positiveInteger('maxBatch', options.maxBatch ?? 500)
  const maxQueue = positiveInteger('maxQueue', options.maxQueue ?? 100_000)
  const appendOptions = {
    queue: options.queueForDelivery ?? true,
    ...(options.queueForWebhook === false ? { webhook: false } : {}),
  }
  const queue: StoredAuditEvent[] = []
  let dropped = 0
  let droppedUnreported = 0
  const spool = options.spool
  /** An append failed (a full disk): none until a flush has stored what the spool missed. */
  let spoolFailed = false

  const runner = createFlushRunner(
    async () => {
      // What the spool holds now is in the queue: once the queue is drained it is stored.
      spool?.seal()
      // Only what was queued when the flush began (the sealed segment's events): under a
      // steady stream, draining until empty meant one small commit per round trip to the store.
      let due = queue.length
      while (due > 0) {
        const batch = queue.slice(0, Math.min(maxBatch, due))
        await store.appendAudit(batch, appendOptions)
        // Only this loop removes from the head; writes during the await were appended.
        queue.splice(0, batch.length)
        due -= batch.length
      }
      spool?.release()
      // Stored, so the disk takes writes again: the next events are spooled again (they
      // were dropped for good before, and a kill after a full disk lost what was queued).
      spoolFailed = false
      if (droppedUnreported > 0) {
        const count = droppedUnreported
        await store.appendAudit([droppedEvent(clock.now(), { count })], appendOptions)
        droppedUnreported -= count
      }
    },
    options.flushIntervalMs ?? 200,
    options.onError,
    () => queue.length > 0 || droppedUnreported > 0,
    options.recoverSpool,
  )

  return {
    write(event) {
      if (queue.length >= maxQueue) {
        dropped++
        droppedUnreported++
        return
      }
      const stored = {
        ...event,
        id: event.id ?? timeOrderedUuid(),
        time: event.time ?? clock.now(),
      }
      queue.push(stored)
      try {
        if (!spoolFailed) spool?.append(stored)
      } catch (error) {
        // A full or failing disk: memory alone until a flush succeeds (its seal leaves a torn
        // line at the end of its segment).
        spoolFailed = true
        ;(options.onError ?? warnOncePerOutage())(error)
      }
      if (queue.length === maxBatch) runner.flushSoon()
      runner.due()
    },
    flush: runner.flush,
    async close() {
      await runner.close()
      // Everything was stored (close rejects otherwise, and the spool stays for a restart).
      spool?.close()
    },
    stats: () => ({ queued: queue.length, dropped }),
  }
}

/** Where the audit writer spools each event until stored (audit-spool.ts opens one). */
export interface AuditSpool {
  /** Appends one event to the current segment (one synchronous write). */
  append(event: StoredAuditEvent): void
  /** Seals the current segment (if it holds anything) and starts a new one. */
  seal(): void
  /** Everything sealed so far is stored: its segments are deleted. */
  release(): void
  /** Closes and deletes the current segment (call after a final flush that stored all). */
  close(): void
}

/** The record of a gap in the audit trail: `details.count` events that were not stored. */
export function droppedEvent(
  time: number,
  details: { readonly count: number; readonly reason?: string },
): StoredAuditEvent {
  return {
    id: timeOrderedUuid(),
    time,
    type: 'audit.dropped',
    tenantId: null,
    actor: null,
    outcome: 'dropped',
    clientAddress: null,
    requestId: null,
    details,
  }
}

export interface FlushRunner {
  flush(): Promise<void>
  /** Starts a flush unless one is running; failures go to the error handler. */
  flushSoon(): void
  /** Something was written: a flush runs within the interval (arms the timer if idle). */
  due(): void
  close(): Promise<void>
}

/**
 * Serialises flushes (one at a time, in order) and drives them from an unref()'d timer that
 * is armed only while `pending()` says something is left to write: an idle process wakes
 * for none of its writers (an interval woke it 6.2 times a second for three empty flushes).
 * A write calls `due()`; a flush that leaves something (a failure, writes meanwhile) re-arms.
 *
 * `leftover`: what killed processes left on disk (a spool or journal recovery the store
 * refused at start), run after each flush that stored until it succeeds, and pending until
 * then: without it those writes waited for the next start, which a scaled-down instance and
 * an idle one never get.
 */
export function createFlushRunner(
  drain: () => Promise<void>,
  intervalMs: number,
  onError: FlushErrorHandler | undefined,
  pending: () => boolean,
  leftover?: (() => Promise<unknown>) | undefined,
): FlushRunner {
  if (!Number.isFinite(intervalMs) || intervalMs < 0) {
    throw new RangeError('flushIntervalMs must be >= 0')
  }
  const report = onError ?? warnOncePerOutage()
  let tail: Promise<void> = Promise.resolve()
  let running = 0
  let timer: ReturnType<typeof setTimeout> | undefined
  let closed = false
  let recover = leftover

  const drainThenRecover = async () => {
    await drain()
    if (recover === undefined) return
    await recover()
    recover = undefined
  }
  const flush = (): Promise<void> => {
    running++
    const run = tail.then(drainThenRecover).finally(() => {
      running--
    })
    tail = run.catch(() => {})
    return run
  }
  const flushSoon = () => {
    if (running === 0) flushThenRearm()
  }
  const due = () => {
    if (timer !== undefined || closed || intervalMs === 0) return
    timer = setTimeout(tick, intervalMs)
    timer.unref()
  }
  const flushThenRearm = () => {
    flush()
      .catch(report)
      .finally(() => {
        if (pending() || recover !== undefined) due()
      })
  }
  // A flush already running (an explicit one) is left alone; the next interval looks again.
  const tick = () => {
    timer = undefined
    if (running > 0) due()
    else flushThenRearm()
  }

  if (recover !== undefined) due()

  return {
    flush,
    flushSoon,
    due,
    async close() {
      closed = true
      clearTimeout(timer)
      timer = undefined
      await flush()
    },
  }
}

function warnOncePerOutage(): FlushErrorHandler {
  let lastWarnedAt = 0
  return (error) => {
    // At most one warning a minute: a store that is down fails every flush.
    const now = Date.now()
    if (now - lastWarnedAt < 60_000) return
    lastWarnedAt = now
    process.emitWarning(`write-behind flush failed; data kept for retry: ${String(error)}`)
  }
}

/**
 * A UUIDv7-layout id (RFC 9562): 48 bits of Unix milliseconds, version 7, then the v4 UUID's
 * random bits (74 of them, as v7 has).
 *
 * Why not `randomUUID()`: audit ids are the primary key of `audit_events` and a unique key of
 * the webhook outbox. Random keys land on random B-tree pages of an ever-growing table, so
 * once the table outgrows SQLite's page cache every insert reads and rewrites cold pages:
 * measured on Node 24 / SQLite (WAL, 200k events), 50–80 µs per event with v4 ids against
 * 11–15 µs with time-ordered ones, paid on the event loop for every audited 401. Time-ordered
 * ids append at the right edge. Node's own `crypto.randomUUIDv7` (from Node 24.16) is used when
 * present: ~0.2 µs against ~0.6 µs for the string assembly below, the fallback for 24.12–24.15.
 */
const timeOrderedUuid: () => string =
  (crypto as { randomUUIDv7?: () => string }).randomUUIDv7 ??
  (() => {
    const ms = Date.now().toString(16).padStart(12, '0')
    // randomUUID(): xxxxxxxx-xxxx-4xxx-Nxxx-xxxxxxxxxxxx; keep everything after the version digit.
    return `${ms.slice(0, 8)}-${ms.slice(8, 12)}-7${crypto.randomUUID().slice(15)}`
  })

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be >= 1`)
  return value
}
