/**
 * The rules of the lookup cache (cached-lookups.ts says why each exists), apart from where
 * its entries live: freshness (TTL), negative entries, one store call for concurrent misses,
 * stale-if-error, invalidation and resync. Found entries live in a `CacheSlots` given by the
 * caller (the packed layout of packed-lookup-slots.ts in production; any bounded map works).
 */

import type { Clock } from '../core/ports.ts'

/**
 * Where a cache keeps its entries: each key with a value and the time it expires. Bounded:
 * `set` of a new key when full evicts the entry least recently used (set or hit), as the
 * storage approximates it.
 */
export interface CacheSlots<V> {
  /** Entries held now. */
  readonly size: number
  /** The value under `key` if its entry expires after `now` (a hit: marks it used); an expired entry is deleted. */
  get(key: string, now: number): V | undefined
  /** Holds `value` under `key` until `expiresAt`, replacing what the key held. */
  set(key: string, value: V, expiresAt: number, now: number): void
  delete(key: string): void
  clear(): void
}

export interface LookupCacheSettings {
  /** How long a found value is served without the store, in ms; 0 caches nothing found. */
  readonly ttlMs: number
  /** How long a "not found" is remembered, in ms; 0 remembers none. */
  readonly negativeTtlMs: number
  /** Bound on "not found" entries. */
  readonly maxNegativeEntries: number
  readonly clock: Clock
}

/** Counters shared by the caches of one `CachedLookups`. */
export interface LookupCounters {
  hits: number
  misses: number
  stale: number
}

/**
 * One lookup (key -> value or undefined) cached by the rules above. Values are never
 * `undefined` (that is "not found"); an error of `load` is never cached.
 */
export class LookupCache<V> {
  readonly #settings: LookupCacheSettings
  readonly #counters: LookupCounters
  readonly #load: (key: string) => Promise<V | undefined>
  readonly #found: CacheSlots<V>
  // Keys read as not found, with when that expires; insertion order = oldest first. Kept
  // apart from the found entries so that a flood of unknown keys cannot evict them.
  readonly #missing = new Map<string, number>()
  readonly #lastKnown: LastKnown<V> | undefined
  readonly #inFlight = new Map<string, Promise<V | undefined>>()
  #epoch = 0

  constructor(
    settings: LookupCacheSettings,
    counters: LookupCounters,
    load: (key: string) => Promise<V | undefined>,
    found: CacheSlots<V>,
    /** Stale-if-error: a `LastKnown` to serve from when `load` throws; none for fail-closed. */
    lastKnown?: LastKnown<V>,
  ) {
    this.#settings = settings
    this.#counters = counters
    this.#load = load
    this.#found = found
    this.#lastKnown = lastKnown
  }

  get size(): number {
    return this.#found.size + this.#missing.size
  }

  /** A hit is answered with the value itself; a miss with the (shared) store promise. */
  get(key: string): V | undefined | Promise<V | undefined> {
    const now = this.#settings.clock.now()
    const value = this.#found.get(key, now)
    if (value !== undefined) {
      this.#counters.hits++
      return value
    }
    const missingUntil = this.#missing.get(key)
    if (missingUntil !== undefined) {
      if (missingUntil > now) {
        this.#counters.hits++
        return undefined
      }
      this.#missing.delete(key)
    }
    const pending = this.#inFlight.get(key)
    if (pending !== undefined) {
      this.#counters.hits++
      return pending
    }
    this.#counters.misses++
    return this.#fetch(key)
  }

  invalidate(key: string): void {
    // A read that started before the change may return the old row (a revoked token still
    // unrevoked): the epoch stops it from being cached, and later callers do not join it.
    // The last-known value is outdated too: serving it during an outage would undo the
    // very change (e.g. a tenant disable) this call reports.
    this.#epoch++
    this.#found.delete(key)
    this.#missing.delete(key)
    this.#inFlight.delete(key)
    this.#lastKnown?.forget(key)
  }

  /** Resync: drops everything served without asking the store; keeps the last-known values. */
  clearFresh(): void {
    this.#epoch++
    this.#found.clear()
    this.#missing.clear()
    this.#inFlight.clear()
  }

  clear(): void {
    this.clearFresh()
    this.#lastKnown?.clear()
  }

  #fetch(key: string): Promise<V | undefined> {
    const epoch = this.#epoch
    const promise = this.#load(key).then(
      (value) => {
        if (this.#inFlight.get(key) === promise) this.#inFlight.delete(key)
        if (epoch === this.#epoch) {
          this.#remember(key, value)
          this.#lastKnown?.record(key, value, this.#settings.clock.now())
        }
        return value
      },
      (error: unknown) => {
        if (this.#inFlight.get(key) === promise) this.#inFlight.delete(key)
        const now = this.#settings.clock.now()
        const stale = this.#lastKnown?.lookup(key, now)
        if (stale === undefined) throw error
        this.#counters.stale++
        // Served as a found entry for one TTL, so that an outage costs one failing store
        // call per key per TTL rather than one per request (N instances retrying a
        // recovering database on every request would hold it down), never past the
        // maximum staleness.
        if (epoch === this.#epoch && this.#settings.ttlMs !== 0) {
          const expiresAt = Math.min(now + this.#settings.ttlMs, stale.usableUntil)
          this.#found.set(key, stale.value, expiresAt, this.#settings.clock.now())
        }
        return stale.value
      },
    )
    this.#inFlight.set(key, promise)
    return promise
  }

  #remember(key: string, value: V | undefined): void {
    const { clock, ttlMs, negativeTtlMs, maxNegativeEntries } = this.#settings
    const now = clock.now()
    if (value === undefined) {
      if (negativeTtlMs === 0) return
      this.#missing.delete(key)
      this.#missing.set(key, now + negativeTtlMs)
      evictOldest(this.#missing, maxNegativeEntries)
    } else if (ttlMs !== 0) {
      this.#found.set(key, value, now + ttlMs, now)
    }
  }
}

/**
 * The last value each key was successfully read as, with the time of that read: consulted
 * only when the store throws, and only while the read is at most `maxAgeMs` old.
 */
export class LastKnown<V> {
  readonly #maxAgeMs: number
  readonly #maxEntries: number
  // Insertion order = order of the last successful read: the first key is the oldest.
  readonly #entries = new Map<string, { readonly value: V; readonly readAt: number }>()

  constructor(maxAgeMs: number, maxEntries: number) {
    this.#maxAgeMs = maxAgeMs
    this.#maxEntries = maxEntries
  }

  /** A successful read: `undefined` (not found) forgets the key. */
  record(key: string, value: V | undefined, now: number): void {
    this.#entries.delete(key)
    if (value === undefined) return
    this.#entries.set(key, { value, readAt: now })
    evictOldest(this.#entries, this.#maxEntries)
  }

  /** The last-known value and until when it may still be served, if not too old. */
  lookup(key: string, now: number): { value: V; usableUntil: number } | undefined {
    const entry = this.#entries.get(key)
    if (entry === undefined) return undefined
    const usableUntil = entry.readAt + this.#maxAgeMs
    if (usableUntil < now) {
      this.#entries.delete(key)
      return undefined
    }
    return { value: entry.value, usableUntil }
  }

  forget(key: string): void {
    this.#entries.delete(key)
  }

  clear(): void {
    this.#entries.clear()
  }
}

function evictOldest(map: Map<string, unknown>, max: number): void {
  for (const key of map.keys()) {
    if (map.size <= max) return
    map.delete(key)
  }
}
