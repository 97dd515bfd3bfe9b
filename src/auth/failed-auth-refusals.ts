/** What the recorder writes: one audit event per address and window. */
export interface RefusalEvent {
  readonly clientAddress: string | null
  /** Request id of the first refused request of the window (correlates with its log line). */
  readonly requestId: string
  /** Requests refused in the window. */
  readonly refused: number
  readonly windowSec: number
}

export interface RefusalRecorder {
  /** Counts one request refused by the failed-authentication limit. */
  record(clientAddress: string, requestId: string): void
  /** Writes every pending aggregate (shutdown). */
  flush(): void
}

/** Addresses tracked at once; beyond it refusals are counted under one address-less event. */
const MAX_ADDRESSES = 10_000
const OVERFLOW = '\0overflow'

/**
 * Aggregates the requests the failed-authentication limit refuses into one audit event per
 * address and window, with a count. Why: the limit exists to stop paying per request on
 * behalf of a guessing client, and an audit row per refused request is the same cost moved
 * to the database (a 401 flood grew it by megabytes a second). HAProxy's stick tables and
 * Envoy's rate-limit stats likewise keep counters, not a record per denied request.
 */
export function createRefusalRecorder(options: {
  readonly windowSec: number
  readonly write: (event: RefusalEvent) => void
  readonly now?: () => number
}): RefusalRecorder & { close(): void } {
  const now = options.now ?? Date.now
  const windowMs = options.windowSec * 1000
  const pending = new Map<string, { start: number; requestId: string; refused: number }>()

  const writeOut = (key: string) => {
    const entry = pending.get(key)
    if (!entry) return
    pending.delete(key)
    options.write({
      clientAddress: key === OVERFLOW ? null : key,
      requestId: entry.requestId,
      refused: entry.refused,
      windowSec: options.windowSec,
    })
  }
  const flushDue = () => {
    const t = now()
    for (const [key, entry] of pending) if (t - entry.start >= windowMs) writeOut(key)
  }
  const timer = setInterval(flushDue, Math.min(windowMs, 1000))
  timer.unref()

  return {
    record(clientAddress, requestId) {
      let key = clientAddress
      if (!pending.has(key) && pending.size >= MAX_ADDRESSES) key = OVERFLOW
      const entry = pending.get(key)
      if (entry && now() - entry.start < windowMs) {
        entry.refused++
        return
      }
      if (entry) writeOut(key)
      pending.set(key, { start: now(), requestId, refused: 1 })
    },
    flush() {
      for (const key of [...pending.keys()]) writeOut(key)
    },
    close() {
      clearInterval(timer)
      this.flush()
    },
  }
}
