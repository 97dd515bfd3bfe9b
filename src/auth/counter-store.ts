import { fitSlots, KeyedSlots } from '../lib/keyed-slots.ts'
import type { CounterResult, CounterStore, Counters } from './counters.ts'
import { connectRedis, type RedisClient } from './redis-client.ts'
import { RedisCounters } from './redis-counters.ts'

export type { CounterResult, CounterStore, Counters } from './counters.ts'

type Callback = (error: Error | null, result?: CounterResult) => void

/**
 * In-process counters, least recently used dropped first once `maxKeys` are held. A key maps
 * to a slot (`KeyedSlots`: keys in typed arrays, in recency order); the window's start and its
 * hits sit at that index of two typed arrays.
 * Why not a `{ current, ttl, startMs }` object per key, or a `Map` of key strings: with the
 * 100,000 per-token counters `rateLimit.localMaxKeys` allows, the objects and their boxed
 * doubles cost ~80 bytes a key and the `pat:<id>` key strings and the Map's table ~110 more,
 * all long-lived heap; the slots cost ~75 bytes off the V8 heap and no allocation per hit.
 */
export class MemoryCounters implements Counters {
  readonly #maxKeys: number
  readonly #now: () => number
  readonly #slots: KeyedSlots
  #startMs = new Float64Array(0)
  #hits = new Float64Array(0)
  readonly #result: { current: number; ttl: number } = { current: 0, ttl: 0 }

  constructor(maxKeys: number, now: () => number = Date.now) {
    this.#maxKeys = maxKeys
    this.#now = now
    // 32 bytes: `pat:tok_` + a 20-character id, tenant ids and address keys fit inline.
    this.#slots = new KeyedSlots(maxKeys, 32)
  }

  /** Keys held now (for tests and diagnostics). */
  get size(): number {
    return this.#slots.size
  }

  // The callbacks' results are their callers' own (a promise may hold one while other
  // requests count): a copy of the reused one.
  incr(key: string, callback: Callback, timeWindow: number): void {
    const { current, ttl } = this.countNow(key, true, timeWindow, 0, this.#now())
    callback(null, { current, ttl })
  }

  read(key: string, callback: Callback, timeWindow: number): void {
    const { current, ttl } = this.countNow(key, false, timeWindow, 0, this.#now())
    callback(null, { current, ttl })
  }

  /**
   * `Counters.countNow`; `now` omitted: this counter's clock. The result is one object these
   * counters reuse, valid until their next count (the limiter reads it first; its token and
   * tenant counts are in different children): no object per count on the request path.
   */
  countNow(
    key: string,
    increment: boolean,
    timeWindow: number,
    _max = 0,
    now = this.#now(),
  ): CounterResult {
    const slots = this.#slots
    let slot = slots.find(key)
    if (!increment) {
      const startMs = slot === -1 ? 0 : (this.#startMs[slot] as number)
      if (slot === -1 || startMs + timeWindow <= now) return this.#answer(0, 0)
      return this.#answer(this.#hits[slot] as number, timeWindow - (now - startMs))
    }
    if (slot === -1) {
      if (slots.size >= this.#maxKeys) slots.delete(slots.oldest())
      slot = slots.add(key)
      this.#startMs = fitSlots(this.#startMs, slots)
      this.#hits = fitSlots(this.#hits, slots)
      this.#startMs[slot] = now
      this.#hits[slot] = 1
    } else {
      slots.touch(slot)
      if ((this.#startMs[slot] as number) + timeWindow <= now) {
        this.#startMs[slot] = now
        this.#hits[slot] = 1
      } else {
        this.#hits[slot] = (this.#hits[slot] as number) + 1
      }
    }
    const startMs = this.#startMs[slot] as number
    return this.#answer(this.#hits[slot] as number, timeWindow - (now - startMs))
  }

  #answer(current: number, ttl: number): CounterResult {
    const result = this.#result
    result.current = current
    result.ttl = ttl
    return result
  }
}

export interface FallbackStoreOptions {
  /** Connected (or connecting) client; omitted: in-process counters only. */
  readonly redis?: RedisClient | undefined
  readonly redisPrefix: string
  /** Counters kept in-process per policy (LRU). */
  readonly localMaxKeys: number
  /** After a failed Redis command, Redis is not tried again for this long. */
  readonly redisRetryMs?: number
  readonly log: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void }
}

/**
 * Redis availability, shared by every policy's store: one warning per outage, one info line
 * when Redis is back. Down when the client is not `ready`, or for `redisRetryMs` after a
 * failed command (a Redis that hangs with the TCP connection still open).
 */
class RedisHealth {
  readonly #redis: RedisClient
  readonly #retryMs: number
  readonly #log: FallbackStoreOptions['log']
  #down = false
  #skipUntil = 0

  constructor(redis: RedisClient, retryMs: number, log: FallbackStoreOptions['log']) {
    this.#redis = redis
    this.#retryMs = retryMs
    this.#log = log
  }

  usable(): boolean {
    if (this.#redis.status !== 'ready') {
      this.failed(undefined)
      return false
    }
    return Date.now() >= this.#skipUntil
  }

  failed(error: Error | undefined): void {
    if (error) this.#skipUntil = Date.now() + this.#retryMs
    if (this.#down) return
    this.#down = true
    this.#log.warn(
      { err: error, redisStatus: this.#redis.status },
      'rate-limit counters: Redis unavailable; limiting in-process (per instance) until it is back',
    )
  }

  succeeded(): void {
    if (!this.#down) return
    this.#down = false
    this.#log.info({}, 'rate-limit counters: Redis is back; limits are shared again')
  }
}

/**
 * The counter store the limiter counts with: RedisCounters when a client is configured and
 * healthy, else MemoryCounters. Why fall back instead of
 * skipping the limits on a store error: a Redis outage must neither answer 5xx
 * nor switch abuse protection off, so each instance keeps limiting on its own until Redis
 * returns. Counts made in-process during an outage are not merged back.
 *
 * `child({ policy })` gives each policy its own counters and Redis key prefix.
 */
export class FallbackStore implements CounterStore {
  readonly #options: FallbackStoreOptions
  readonly #health: RedisHealth | undefined
  readonly #local: Counters
  readonly #redis: Counters | undefined

  constructor(options: FallbackStoreOptions, policy = 'default', health?: RedisHealth) {
    this.#options = options
    this.#local = new MemoryCounters(options.localMaxKeys)
    if (options.redis) {
      this.#health =
        health ?? new RedisHealth(options.redis, options.redisRetryMs ?? 1000, options.log)
      this.#redis = new RedisCounters(options.redis, `${options.redisPrefix}${policy}:`)
    }
  }

  incr(key: string, callback: Callback, timeWindow: number, max: number): void {
    this.#call('incr', key, callback, timeWindow, max)
  }

  read(key: string, callback: Callback, timeWindow: number, max: number): void {
    this.#call('read', key, callback, timeWindow, max)
  }

  /** In-process counters answer now; Redis, while usable, only through `incr`/`read`. */
  countNow(
    key: string,
    increment: boolean,
    timeWindow: number,
    max: number,
    now?: number,
  ): CounterResult | undefined {
    if (this.#redis && this.#health?.usable()) return undefined
    return (this.#local as MemoryCounters).countNow(key, increment, timeWindow, max, now)
  }

  child(params: { policy?: string }): CounterStore {
    return new FallbackStore(this.#options, params.policy ?? 'default', this.#health)
  }

  #call(
    method: 'incr' | 'read',
    key: string,
    callback: Callback,
    timeWindow: number,
    max: number,
  ): void {
    const redis = this.#redis
    const health = this.#health
    if (!redis || !health?.usable()) {
      this.#local[method](key, callback, timeWindow, max)
      return
    }
    redis[method](
      key,
      (error, result) => {
        if (error || !result) {
          health.failed(error ?? new Error('empty reply'))
          this.#local[method](key, callback, timeWindow, max)
          return
        }
        health.succeeded()
        callback(null, result)
      },
      timeWindow,
      max,
    )
  }
}

export interface CounterStoreSettings {
  /** Shared counters across instances (redis-client.ts: one server, Sentinel or Cluster). */
  readonly redisUrl?: string | undefined
  readonly redisPrefix: string
  readonly redisTimeoutMs: number
  readonly localMaxKeys: number
  readonly log: FallbackStoreOptions['log']
}

/** Redis as readiness reports it; undefined without `redisUrl`. */
export type RedisState = 'connected' | 'unavailable' | undefined

/**
 * The counter store for the settings, how to close its Redis connection (if any), and that
 * connection's state.
 */
export async function openCounterStore(settings: CounterStoreSettings): Promise<{
  readonly store: CounterStore
  close(): void
  redisState(): RedisState
}> {
  const redis = settings.redisUrl
    ? await connectRedis(settings.redisUrl, {
        timeoutMs: settings.redisTimeoutMs,
        log: settings.log,
      })
    : undefined
  const store = new FallbackStore({
    redis,
    redisPrefix: settings.redisPrefix,
    localMaxKeys: settings.localMaxKeys,
    log: settings.log,
  })
  return {
    store,
    close: () => redis?.disconnect(),
    redisState: () => redis && (redis.status === 'ready' ? 'connected' : 'unavailable'),
  }
}
