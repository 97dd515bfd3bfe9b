/**
 * A small TTL cache in front of the store for the two lookups every request makes: the PAT
 * by hash and the tenant by id. It keeps the store off the hot path and answers floods of
 * well-formed but unknown tokens from memory (negative entries, in a separate, bounded map
 * so that such a flood cannot evict the entries of real tokens).
 *
 * Freshness. A revocation or tenant change made through this process's store reaches the
 * cache at once (the server wires `store.watch` to `invalidatePat` / `invalidateTenant`);
 * one made by ANOTHER process (another instance, a worker, the CLI) arrives the same way, by
 * the store's change log (change-log.ts), within its poll interval (500 ms) or sooner when
 * NOTIFY wakes it. `ttlMs` bounds staleness when nothing is watching; keep it short (default
 * 2 s): the cache only absorbs request bursts.
 *
 * Failures. An error from the store is never cached and is passed to every caller waiting
 * on that lookup, so the core answers 503 rather than deciding without the store. One
 * exception, for tenants only: stale-if-error, below.
 *
 * Stale-if-error for tenants. A JWT needs the store only for its tenant check, so during a
 * store outage JWT callers should keep working (issue #5). Each tenant's last successful read
 * is kept in a separate, bounded "last known" map that is consulted ONLY when the store
 * throws, and only while that read is younger than `tenantStaleIfErrorMs` (default 1 h).
 * The trade-off, accepted deliberately: a tenant disabled while this instance could not hear
 * about it (its notification lost with the change feed) and could not read the store keeps
 * working for JWTs until the store answers again, and never longer than that maximum
 * staleness. A `tenant_changed` notification (`invalidateTenant`) drops the last-known state
 * too, since it is then known to be outdated: such a tenant fails closed until the store
 * answers. PATs are never served stale: an unreachable store means 503 for every PAT, so a
 * revocation can never be bypassed by taking the database down.
 *
 * Resync. When changes may have been missed (the change log could not be read: the store is
 * down), `resync()` drops every entry that is served without asking the store: every PAT,
 * found or not, and every fresh tenant; only the last-known tenants survive, as they are
 * never served while the store answers. Once the log is readable again the follower catches
 * up by sequence, so what was refilled meanwhile is corrected entry by entry.
 *
 * Layout. The rules above are lookup-cache-rules.ts'; the found entries they keep live in the
 * packed slots of packed-lookup-slots.ts (PATs in byte-packed columns). This file composes
 * the two for the PAT and the tenant lookup.
 */

import type { AuthLookups, Clock, PatRecord, Tenant } from '../core/ports.ts'
import { systemClock } from '../core/ports.ts'
import {
  LastKnown,
  LookupCache,
  type LookupCacheSettings,
  type LookupCounters,
} from './lookup-cache-rules.ts'
import { Interner, PackedSlots, PatColumns } from './packed-lookup-slots.ts'

export interface CachedLookupsOptions {
  /** How long a found PAT or tenant is served from memory, in ms. Default 2000; 0 disables. */
  readonly ttlMs?: number | undefined
  /** How long a "not found" is remembered, in ms. Default min(ttlMs, 500). */
  readonly negativeTtlMs?: number | undefined
  /** Bound on found entries, per kind (PATs, tenants). Default 100,000. */
  readonly maxEntries?: number | undefined
  /** Bound on "not found" entries, per kind. Default min(maxEntries, 10,000). */
  readonly maxNegativeEntries?: number | undefined
  /**
   * Stale-if-error for tenants, in ms: when the store throws, a tenant read successfully no
   * longer ago than this is answered from that last read. Default 3,600,000 (1 h); 0 disables.
   * Never applies to PATs.
   */
  readonly tenantStaleIfErrorMs?: number | undefined
  readonly clock?: Clock | undefined
}

export interface CacheStats {
  /** Lookups answered without a new store call (cached, or joined an in-flight one). */
  readonly hits: number
  /** Lookups that called the store. */
  readonly misses: number
  /** Entries held now, found and "not found", PATs and tenants together. */
  readonly size: number
  /** Tenant lookups answered from the last-known state because the store threw. */
  readonly stale: number
}

export interface CachedLookups extends AuthLookups {
  findPatByHash(tokenHash: string): Promise<PatRecord | undefined>
  findTenant(id: string): Promise<Tenant | undefined>
  /**
   * The same lookups (same entries, counters and freshness rules) answering a cache hit
   * with the value itself instead of a resolved promise; a miss still returns the store's
   * promise. For the core's `createMaybeSyncAuthenticator`: a cached PAT request then
   * authenticates without a microtask turn.
   */
  readonly maybeSync: AuthLookups
  /** Forget one PAT (by token hash), e.g. on a `pat_changed` notification. */
  invalidatePat(tokenHash: string): void
  /** Forget one tenant, e.g. on a `tenant_changed` notification. */
  invalidateTenant(id: string): void
  /**
   * Notifications may have been missed (a `resync` change): forget every PAT and every fresh
   * tenant, keeping only the last-known tenants used when the store throws.
   */
  resync(): void
  /** Forget everything, the last-known tenants included. */
  clear(): void
  stats(): CacheStats
}

/**
 * Wraps `inner` (normally the `Store`) with the cache described above.
 *
 * @example
 *   const lookups = createCachedLookups(store, { ttlMs: 2000, clock })
 *   store.watch((c) => c.kind === 'pat_changed' && lookups.invalidatePat(c.tokenHash))
 *   store.watch((c) => c.kind === 'resync' && lookups.resync())
 */
export function createCachedLookups(
  inner: AuthLookups,
  options: CachedLookupsOptions = {},
): CachedLookups {
  const ttlMs = nonNegative('ttlMs', options.ttlMs ?? 2000)
  const maxEntries = positive('maxEntries', options.maxEntries ?? 100_000)
  const settings: LookupCacheSettings = {
    ttlMs,
    negativeTtlMs: nonNegative('negativeTtlMs', options.negativeTtlMs ?? Math.min(ttlMs, 500)),
    maxNegativeEntries: positive(
      'maxNegativeEntries',
      options.maxNegativeEntries ?? Math.min(maxEntries, 10_000),
    ),
    clock: options.clock ?? systemClock,
  }
  const staleIfErrorMs = nonNegative(
    'tenantStaleIfErrorMs',
    options.tenantStaleIfErrorMs ?? 3_600_000,
  )
  const counters: LookupCounters = { hits: 0, misses: 0, stale: 0 }
  // Why PATs get no last-known map: serving a PAT without the store would let a revoked
  // token through for as long as the store is down. Fail closed (503) instead.
  const pats = new LookupCache<PatRecord>(
    settings,
    counters,
    (hash) => Promise.resolve(inner.findPatByHash(hash)),
    new PackedSlots(maxEntries, new PatColumns(new Interner())),
  )
  const tenants = new LookupCache<Tenant>(
    settings,
    counters,
    (id) => Promise.resolve(inner.findTenant(id)),
    new PackedSlots<Tenant>(maxEntries),
    staleIfErrorMs > 0 ? new LastKnown<Tenant>(staleIfErrorMs, maxEntries) : undefined,
  )
  return {
    findPatByHash: (tokenHash) => Promise.resolve(pats.get(tokenHash)),
    findTenant: (id) => Promise.resolve(tenants.get(id)),
    maybeSync: {
      findPatByHash: (tokenHash) => pats.get(tokenHash),
      findTenant: (id) => tenants.get(id),
    },
    invalidatePat: (tokenHash) => pats.invalidate(tokenHash),
    invalidateTenant: (id) => tenants.invalidate(id),
    resync() {
      pats.clearFresh()
      tenants.clearFresh()
    },
    clear() {
      pats.clear()
      tenants.clear()
    },
    stats: () => ({ ...counters, size: pats.size + tenants.size }),
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
