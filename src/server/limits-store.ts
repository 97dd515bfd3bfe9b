import { createRequire } from 'node:module'
import type { Redis } from 'ioredis'

/** A counter result as @fastify/rate-limit's stores report it: hits so far, ms left. */
export interface CounterResult {
  readonly current: number
  readonly ttl: number
}

type Callback = (error: Error | null, result?: CounterResult) => void

/** The store contract of @fastify/rate-limit's stores (`incr`, `read`, `child`), called by rate-limit.ts. */
export interface CounterStore {
  incr(key: string, callback: Callback, timeWindow: number, max: number): void
  read(key: string, callback: Callback, timeWindow: number, max: number): void
  child(params: { policy?: string }): CounterStore
}

type LocalStoreCtor = new (
  continueExceeding: boolean,
  exponentialBackoff: boolean,
  cache: number,
) => CounterStore
type RedisStoreCtor = new (
  continueExceeding: boolean,
  exponentialBackoff: boolean,
  redis: Redis,
  prefix: string,
) => CounterStore

// The library's own stores (fixed window; Redis: one Lua INCR+PEXPIRE per hit). The package
// has no `exports` map and ships no types for these files, hence `require` and the casts;
// the version is pinned in package.json.
const require = createRequire(import.meta.url)
const LocalStore = require('@fastify/rate-limit/store/LocalStore.js') as LocalStoreCtor
const RedisStore = require('@fastify/rate-limit/store/RedisStore.js') as RedisStoreCtor

export interface FallbackStoreOptions {
  /** Connected (or connecting) client; omitted: in-process counters only. */
  readonly redis?: Redis | undefined
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
  readonly #redis: Redis
  readonly #retryMs: number
  readonly #log: FallbackStoreOptions['log']
  #down = false
  #skipUntil = 0

  constructor(redis: Redis, retryMs: number, log: FallbackStoreOptions['log']) {
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
 * The counter store rate-limit.ts counts with: the library's RedisStore when a client is
 * configured and healthy, else the library's LocalStore. Why fall back instead of the
 * library's `skipOnError` (which stops limiting): a Redis outage must neither answer 5xx
 * nor switch abuse protection off, so each instance keeps limiting on its own until Redis
 * returns. Counts made in-process during an outage are not merged back.
 *
 * `child({ policy })` gives each policy its own counters and Redis key prefix.
 */
export class FallbackStore implements CounterStore {
  readonly #options: FallbackStoreOptions
  readonly #health: RedisHealth | undefined
  readonly #local: CounterStore
  readonly #redis: CounterStore | undefined

  constructor(options: FallbackStoreOptions, policy = 'default', health?: RedisHealth) {
    this.#options = options
    this.#local = new LocalStore(false, false, options.localMaxKeys)
    if (options.redis) {
      this.#health =
        health ?? new RedisHealth(options.redis, options.redisRetryMs ?? 1000, options.log)
      this.#redis = new RedisStore(false, false, options.redis, `${options.redisPrefix}${policy}:`)
    }
  }

  incr(key: string, callback: Callback, timeWindow: number, max: number): void {
    this.#call('incr', key, callback, timeWindow, max)
  }

  read(key: string, callback: Callback, timeWindow: number, max: number): void {
    this.#call('read', key, callback, timeWindow, max)
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
