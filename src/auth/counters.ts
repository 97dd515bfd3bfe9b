/**
 * The counters the limiter counts with, as types only: the in-process and Redis stores
 * (counter-store.ts) implement them, and nothing here needs a Redis client's types.
 */

/** A fixed-window counter's state: hits so far in the window, ms left of it. */
export interface CounterResult {
  readonly current: number
  readonly ttl: number
}

export type CounterCallback = (error: Error | null, result?: CounterResult) => void

/**
 * Fixed-window counters, callback style (in-process answers synchronously, Redis after the
 * round trip): `incr` counts a hit, `read` only looks, `child` gives a policy its own keys.
 */
export interface Counters {
  incr(key: string, callback: CounterCallback, timeWindow: number, max: number): void
  read(key: string, callback: CounterCallback, timeWindow: number, max: number): void
  /**
   * Counts (`increment`) or reads now, when these counters can answer without waiting (the
   * in-process ones, and Redis's in-process fallback during an outage); undefined when the
   * caller has to use `incr`/`read`. The limiter's allowed path then needs no callback.
   * `now`: the caller's clock reading (ms), so one request reads the time once; omitted: the
   * counters' own clock. The result may be an object these counters reuse: read it before
   * counting here again.
   */
  countNow?(
    key: string,
    increment: boolean,
    timeWindow: number,
    max: number,
    now?: number,
  ): CounterResult | undefined
}

/** Counters with a child per policy (its own keys); what the limiter is given. */
export interface CounterStore extends Counters {
  child(params: { policy?: string }): CounterStore
}
