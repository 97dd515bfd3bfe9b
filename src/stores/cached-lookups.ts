/**
 * A small TTL cache in front of the store for the two lookups every request makes: the PAT
 * by hash and the tenant by id. It keeps the store off the hot path and answers floods of
 * well-formed but unknown tokens from memory (negative entries, in a separate, bounded map
 * so that such a flood cannot evict the entries of real tokens).
 *
 * Freshness. A revocation or tenant change made through this process's store reaches the
 * cache at once (the server wires `store.watch` to `invalidatePat` / `invalidateTenant`;
 * Postgres delivers other instances' changes the same way). A change made by ANOTHER
 * process on the same SQLite file, such as `tokengate pat revoke` from the CLI, sends no
 * notification: the revoked token keeps working until its cached entry expires, so `ttlMs`
 * is the upper bound on how long a CLI revocation takes to be enforced. Keep it short
 * (default 2 s): the cache only needs to absorb request bursts, not to last.
 *
 * Failures. An error from the store is never cached and is passed to every caller waiting
 * on that lookup, so the core answers 503 rather than deciding without the store.
 */
import type { AuthLookups, Clock, PatRecord, Tenant } from '../core/ports.ts'
import { systemClock } from '../core/ports.ts'

export interface CachedLookupsOptions {
  /** How long a found PAT or tenant is served from memory, in ms. Default 2000; 0 disables. */
  readonly ttlMs?: number | undefined
  /** How long a "not found" is remembered, in ms. Default min(ttlMs, 500). */
  readonly negativeTtlMs?: number | undefined
  /** Bound on found entries, per kind (PATs, tenants). Default 100,000. */
  readonly maxEntries?: number | undefined
  /** Bound on "not found" entries, per kind. Default min(maxEntries, 10,000). */
  readonly maxNegativeEntries?: number | undefined
  readonly clock?: Clock | undefined
}

export interface CacheStats {
  /** Lookups answered without a new store call (cached, or joined an in-flight one). */
  readonly hits: number
  /** Lookups that called the store. */
  readonly misses: number
  /** Entries held now, found and "not found", PATs and tenants together. */
  readonly size: number
}

export interface CachedLookups extends AuthLookups {
  /** Forget one PAT (by token hash), e.g. on a `pat_changed` notification. */
  invalidatePat(tokenHash: string): void
  /** Forget one tenant, e.g. on a `tenant_changed` notification. */
  invalidateTenant(id: string): void
  /** Forget everything, e.g. when notifications may have been missed. */
  clear(): void
  stats(): CacheStats
}

/**
 * Wraps `inner` (normally the `Store`) with the cache described above.
 *
 * @example
 *   const lookups = createCachedLookups(store, { ttlMs: 2000, clock })
 *   store.watch((c) => c.kind === 'pat_changed' && lookups.invalidatePat(c.tokenHash))
 */
export function createCachedLookups(
  inner: AuthLookups,
  options: CachedLookupsOptions = {},
): CachedLookups {
  const ttlMs = nonNegative('ttlMs', options.ttlMs ?? 2000)
  const maxEntries = positive('maxEntries', options.maxEntries ?? 100_000)
  const settings: Settings = {
    ttlMs,
    negativeTtlMs: nonNegative('negativeTtlMs', options.negativeTtlMs ?? Math.min(ttlMs, 500)),
    maxEntries,
    maxNegativeEntries: positive(
      'maxNegativeEntries',
      options.maxNegativeEntries ?? Math.min(maxEntries, 10_000),
    ),
    clock: options.clock ?? systemClock,
  }
  const counters = { hits: 0, misses: 0 }
  const pats = new TtlCache<PatRecord>(settings, counters, (hash) => inner.findPatByHash(hash))
  const tenants = new TtlCache<Tenant>(settings, counters, (id) => inner.findTenant(id))
  return {
    findPatByHash: (tokenHash) => pats.get(tokenHash),
    findTenant: (id) => tenants.get(id),
    invalidatePat: (tokenHash) => pats.invalidate(tokenHash),
    invalidateTenant: (id) => tenants.invalidate(id),
    clear() {
      pats.clear()
      tenants.clear()
    },
    stats: () => ({ ...counters, size: pats.size + tenants.size }),
  }
}

interface Settings {
  readonly ttlMs: number
  readonly negativeTtlMs: number
  readonly maxEntries: number
  readonly maxNegativeEntries: number
  readonly clock: Clock
}

interface Entry<V> {
  readonly value: V
  readonly expiresAt: number
}

class TtlCache<V> {
  readonly #settings: Settings
  readonly #counters: { hits: number; misses: number }
  readonly #load: (key: string) => Promise<V | undefined>
  // Map iteration order is insertion order: the first key is the least recently used.
  readonly #found = new Map<string, Entry<V>>()
  readonly #missing = new Map<string, number>()
  readonly #inFlight = new Map<string, Promise<V | undefined>>()
  #epoch = 0

  constructor(
    settings: Settings,
    counters: { hits: number; misses: number },
    load: (key: string) => Promise<V | undefined>,
  ) {
    this.#settings = settings
    this.#counters = counters
    this.#load = load
  }

  get size(): number {
    return this.#found.size + this.#missing.size
  }

  get(key: string): Promise<V | undefined> {
    const now = this.#settings.clock.now()
    const entry = this.#found.get(key)
    if (entry !== undefined) {
      this.#found.delete(key)
      if (entry.expiresAt > now) {
        this.#found.set(key, entry)
        this.#counters.hits++
        return Promise.resolve(entry.value)
      }
    }
    const missingUntil = this.#missing.get(key)
    if (missingUntil !== undefined) {
      if (missingUntil > now) {
        this.#counters.hits++
        return Promise.resolve(undefined)
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
    this.#epoch++
    this.#found.delete(key)
    this.#missing.delete(key)
    this.#inFlight.delete(key)
  }

  clear(): void {
    this.#epoch++
    this.#found.clear()
    this.#missing.clear()
    this.#inFlight.clear()
  }

  #fetch(key: string): Promise<V | undefined> {
    const epoch = this.#epoch
    const promise = this.#load(key).then(
      (value) => {
        if (this.#inFlight.get(key) === promise) this.#inFlight.delete(key)
        if (epoch === this.#epoch) this.#remember(key, value)
        return value
      },
      (error: unknown) => {
        if (this.#inFlight.get(key) === promise) this.#inFlight.delete(key)
        throw error
      },
    )
    this.#inFlight.set(key, promise)
    return promise
  }

  #remember(key: string, value: V | undefined): void {
    const { clock, ttlMs, negativeTtlMs, maxEntries, maxNegativeEntries } = this.#settings
    const now = clock.now()
    if (value === undefined) {
      if (negativeTtlMs === 0) return
      this.#missing.delete(key)
      this.#missing.set(key, now + negativeTtlMs)
      evictOldest(this.#missing, maxNegativeEntries)
    } else {
      if (ttlMs === 0) return
      this.#found.delete(key)
      this.#found.set(key, { value, expiresAt: now + ttlMs })
      evictOldest(this.#found, maxEntries)
    }
  }
}

function evictOldest(map: Map<string, unknown>, max: number): void {
  for (const key of map.keys()) {
    if (map.size <= max) return
    map.delete(key)
  }
}

function nonNegative(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${name} must be >= 0`)
  return value
}

function positive(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be >= 1`)
  return value
}
