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
 */

import type { AuthLookups, Clock, PatRecord, Tenant } from '../core/ports.ts'
import { systemClock } from '../core/ports.ts'
import { fitSlots, KeyedSlots } from '../lib/keyed-slots.ts'

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
  const staleIfErrorMs = nonNegative(
    'tenantStaleIfErrorMs',
    options.tenantStaleIfErrorMs ?? 3_600_000,
  )
  const counters = { hits: 0, misses: 0, stale: 0 }
  // Why PATs get no last-known map: serving a PAT without the store would let a revoked
  // token through for as long as the store is down. Fail closed (503) instead.
  const pats = new TtlCache<PatRecord>(
    settings,
    counters,
    (hash) => Promise.resolve(inner.findPatByHash(hash)),
    undefined,
    new PatColumns(new Interner()),
  )
  const tenants = new TtlCache<Tenant>(
    settings,
    counters,
    (id) => Promise.resolve(inner.findTenant(id)),
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

interface Settings {
  readonly ttlMs: number
  readonly negativeTtlMs: number
  readonly maxEntries: number
  readonly maxNegativeEntries: number
  readonly clock: Clock
}

/**
 * Approximate LRU: a hit moves its entry to the most-recent end of the map (a `Map` delete +
 * set of a 64-character key) at most once per this many ms. Why: the move was ~1.4 % of a
 * PAT request's CPU (two per request, the PAT and its tenant) and bought nothing for a key
 * hit thousands of times a second. Eviction stays bounded by `maxEntries`; an entry hit
 * within the last second may only be evicted a little earlier than under exact LRU.
 */
const TOUCH_INTERVAL_MS = 1000

interface Counters {
  hits: number
  misses: number
  stale: number
}

/**
 * The last value each key was successfully read as, with the time of that read: consulted
 * only when the store throws, and only while the read is at most `maxAgeMs` old.
 */
class LastKnown<V> {
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

/** Where the found values of a cache live, by slot. */
interface SlotValues<V> {
  /** Room for slots 0 .. capacity - 1. */
  reserve(capacity: number): void
  write(slot: number, key: string, value: V): void
  /** The value written at `slot` for `key` (the key it is found under). */
  read(slot: number, key: string): V
  release(slot: number): void
  clear(): void
}

/** The values as loaded, one reference per slot (tenants: few, and shared with nobody). */
class PlainValues<V> implements SlotValues<V> {
  #values: (V | undefined)[] = []

  reserve(): void {}

  write(slot: number, _key: string, value: V): void {
    this.#values[slot] = value
  }

  read(slot: number): V {
    return this.#values[slot] as V
  }

  release(slot: number): void {
    this.#values[slot] = undefined
  }

  clear(): void {
    this.#values = []
  }
}

/**
 * Found entries live in slots: `KeyedSlots` gives a key's slot (keys held in typed arrays,
 * in recency order), and the expiry and last-touch time sit at that index of two flat arrays,
 * the value at that index of `values` (as loaded, or in columns: `PatColumns`).
 * Why not a `Map` of keys to `{ value, expiresAt, touchedAt }` objects: with 100,000 cached
 * PATs the 64-character hash strings, the Map's table and those objects cost ~230 bytes a key
 * of long-lived heap; the slots cost ~80 bytes off the V8 heap and no allocation per miss.
 */
class TtlCache<V> {
  readonly #settings: Settings
  readonly #counters: Counters
  readonly #load: (key: string) => Promise<V | undefined>
  readonly #lastKnown: LastKnown<V> | undefined
  // Keys of found entries; the oldest is the least recently used (to within `TOUCH_INTERVAL_MS`).
  readonly #found: KeyedSlots
  readonly #values: SlotValues<V>
  #expiresAt = new Float64Array(0)
  #touchedAt = new Float64Array(0)
  readonly #missing = new Map<string, number>()
  readonly #inFlight = new Map<string, Promise<V | undefined>>()
  #epoch = 0

  constructor(
    settings: Settings,
    counters: Counters,
    load: (key: string) => Promise<V | undefined>,
    lastKnown?: LastKnown<V>,
    /** Where found values are kept (e.g. `PatColumns`); default: as loaded. */
    values: SlotValues<V> = new PlainValues<V>(),
  ) {
    this.#settings = settings
    this.#counters = counters
    this.#load = load
    this.#lastKnown = lastKnown
    this.#values = values
    // 32 bytes: a SHA-256 hex key packed; shorter keys (tenant ids) one byte a character.
    this.#found = new KeyedSlots(settings.maxEntries, 32)
  }

  get size(): number {
    return this.#found.size + this.#missing.size
  }

  /** A hit is answered with the value itself; a miss with the (shared) store promise. */
  get(key: string): V | undefined | Promise<V | undefined> {
    const now = this.#settings.clock.now()
    const slot = this.#found.find(key)
    if (slot !== -1) {
      if ((this.#expiresAt[slot] as number) > now) {
        if (now - (this.#touchedAt[slot] as number) >= TOUCH_INTERVAL_MS) {
          this.#found.touch(slot)
          this.#touchedAt[slot] = now
        }
        this.#counters.hits++
        return this.#values.read(slot, key)
      }
      this.#deleteFound(slot)
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
    const slot = this.#found.find(key)
    if (slot !== -1) this.#deleteFound(slot)
    this.#missing.delete(key)
    this.#inFlight.delete(key)
    this.#lastKnown?.forget(key)
  }

  /** Drops everything served without asking the store; keeps the last-known values. */
  clearFresh(): void {
    this.#epoch++
    this.#found.clear()
    this.#values.clear()
    this.#expiresAt = new Float64Array(0)
    this.#touchedAt = new Float64Array(0)
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
        // call per tenant per TTL rather than one per request (N instances retrying a
        // recovering database on every request would hold it down), never past the
        // maximum staleness.
        if (epoch === this.#epoch) {
          this.#rememberFound(
            key,
            stale.value,
            Math.min(now + this.#settings.ttlMs, stale.usableUntil),
          )
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
    } else {
      this.#rememberFound(key, value, now + ttlMs)
    }
  }

  #rememberFound(key: string, value: V, expiresAt: number): void {
    const { ttlMs, maxEntries, clock } = this.#settings
    if (ttlMs === 0) return
    const found = this.#found
    let slot = found.find(key)
    if (slot === -1) {
      if (found.size >= maxEntries) this.#deleteFound(found.oldest())
      slot = found.add(key)
      this.#expiresAt = fitSlots(this.#expiresAt, found)
      this.#touchedAt = fitSlots(this.#touchedAt, found)
      this.#values.reserve(found.capacity)
    } else {
      found.touch(slot)
    }
    this.#values.write(slot, key, value)
    this.#expiresAt[slot] = expiresAt
    this.#touchedAt[slot] = clock.now()
  }

  #deleteFound(slot: number): void {
    this.#found.delete(slot)
    this.#values.release(slot)
  }
}

/** Bound on each table of `Interner`; a full table starts over (sharing is only a saving). */
const MAX_INTERNED = 10_000

/**
 * One copy of each equal string, and of each (tenant, permissions) pair, among the cached
 * PATs. Rows read from a store come with fresh strings and a fresh permissions array each:
 * 100,000 tokens of one tenant would hold 100,000 copies of its id and of each permission list.
 */
class Interner {
  readonly #strings = new Map<string, string>()
  readonly #groups = new Map<string, PatGroup>()

  string(value: string): string {
    const known = this.#strings.get(value)
    if (known !== undefined) return known
    if (this.#strings.size >= MAX_INTERNED) this.#strings.clear()
    this.#strings.set(value, value)
    return value
  }

  /** A frozen group shared by every cached PAT of this tenant with these permissions. */
  group(tenantId: string, permissions: readonly string[]): PatGroup {
    const key = JSON.stringify([tenantId, permissions])
    const known = this.#groups.get(key)
    if (known !== undefined) return known
    if (this.#groups.size >= MAX_INTERNED) this.#groups.clear()
    const group = Object.freeze({
      tenantId: this.string(tenantId),
      permissions: Object.freeze(permissions.map((item) => this.string(item))),
    })
    this.#groups.set(key, group)
    return group
  }
}

/** What many cached PATs have in common: one shared, frozen copy per distinct pair. */
interface PatGroup {
  readonly tenantId: string
  readonly permissions: readonly string[]
}

/**
 * `PatColumns`' time columns, per slot: created, expires, last used (NaN for null). The times
 * that end a token's life (revoked, superseded, grace) are null for almost every cached PAT
 * and are kept aside (`#ended`).
 */
const TIME_FIELDS = 3

/** A cached PAT's texts: what the text column holds. */
interface PatTexts {
  readonly id: string
  readonly subject: string
  readonly last4: string
}

/** A cached PAT's revocation and rotation times, for the few where any is set. */
interface EndTimes {
  readonly revokedAt: number | null
  readonly supersededAt: number | null
  readonly graceUntil: number | null
}

/** A cached PAT's product fields (issue #24), for the few keys that have any. */
interface ProductFields {
  readonly disabledAt: number | null
  readonly rateLimit: PatRecord['rateLimit'] | null
  readonly quota: PatRecord['quota'] | null
  readonly metadata: PatRecord['metadata'] | null
  readonly externalId: string | null
}

const NO_PRODUCT: ProductFields = Object.freeze({
  disabledAt: null,
  rateLimit: null,
  quota: null,
  metadata: null,
  externalId: null,
})

/**
 * `PatColumns`' text column, per slot: the lengths of the id, subject and last4, then their
 * characters, one byte each (Latin-1). A PAT id (`tok_` + 20) and last4 leave 33 for the subject.
 */
const TEXT_BYTES = 64

/** Marks a slot whose text did not fit `TEXT_BYTES` (or had a wider character): see `#wide`. */
const WIDE = 255

/**
 * Texts decoded lately, by slot modulo this (a power of two): the hits of a busy token reuse
 * its strings instead of decoding them again (~0.2 µs a hit), for ~100 KB of heap at most.
 */
const MEMO_SIZE = 1024

/**
 * Cached PATs in columns: per slot, the id, subject and last 4 characters as bytes, the name
 * (interned) and a shared `PatGroup` (tenant id and permissions), and three times in one
 * Float64Array (the rare revocation and rotation times aside). A hit builds the record from them: a fresh object per caller, so nobody can
 * change what another caller is given; the permission lists are shared and frozen. The token
 * hash is the key the record was found under (a record whose hash differs from it, a store
 * bug the core checks for, keeps its own).
 * Why: a record object kept per token, with its boxed times, cost ~170 bytes a token in
 * cache (as frozen, interned objects; ~680 as the store returns them), three heap strings per
 * token ~120 more; the columns cost ~105 bytes, 16 of them on the V8 heap. The price is one
 * short-lived object and two or three short strings per hit.
 */
class PatColumns implements SlotValues<PatRecord> {
  readonly #interner: Interner
  #names: (string | undefined)[] = []
  #groups: (PatGroup | undefined)[] = []
  #times = new Float64Array(0)
  #text = Buffer.alloc(0)
  // Rare values, kept aside rather than in a column that would be empty almost everywhere.
  readonly #wide = new Map<number, PatTexts>()
  readonly #ended = new Map<number, EndTimes>()
  readonly #product = new Map<number, ProductFields>()
  readonly #memoSlots = new Int32Array(MEMO_SIZE).fill(-1)
  readonly #memoTexts: (PatTexts | undefined)[] = new Array(MEMO_SIZE).fill(undefined)
  readonly #rotatedFrom = new Map<number, string>()
  readonly #foreignHashes = new Map<number, string>()

  constructor(interner: Interner) {
    this.#interner = interner
  }

  reserve(capacity: number): void {
    if (capacity * TIME_FIELDS <= this.#times.length) return
    const times = new Float64Array(capacity * TIME_FIELDS)
    times.set(this.#times)
    this.#times = times
    const text = Buffer.alloc(capacity * TEXT_BYTES)
    this.#text.copy(text)
    this.#text = text
  }

  write(slot: number, key: string, record: PatRecord): void {
    this.#forgetMemo(slot)
    if (this.#writeText(slot, record.id, record.subject, record.last4)) this.#wide.delete(slot)
    else this.#wide.set(slot, { id: record.id, subject: record.subject, last4: record.last4 })
    this.#names[slot] = this.#interner.string(record.name)
    this.#groups[slot] = this.#interner.group(record.tenantId, record.permissions)
    const at = slot * TIME_FIELDS
    const times = this.#times
    times[at] = record.createdAt
    times[at + 1] = record.expiresAt ?? Number.NaN
    times[at + 2] = record.lastUsedAt ?? Number.NaN
    const revokedAt = record.revokedAt
    const supersededAt = record.supersededAt ?? null
    const graceUntil = record.graceUntil ?? null
    if (revokedAt === null && supersededAt === null && graceUntil === null) this.#ended.delete(slot)
    else this.#ended.set(slot, { revokedAt, supersededAt, graceUntil })
    if (record.rotatedFrom === null) this.#rotatedFrom.delete(slot)
    else this.#rotatedFrom.set(slot, record.rotatedFrom)
    const product: ProductFields = {
      disabledAt: record.disabledAt ?? null,
      rateLimit: record.rateLimit ?? null,
      quota: record.quota ?? null,
      metadata: record.metadata ?? null,
      externalId: record.externalId ?? null,
    }
    if (Object.values(product).every((value) => value === null)) this.#product.delete(slot)
    else this.#product.set(slot, product)
    if (record.tokenHash === key) this.#foreignHashes.delete(slot)
    else this.#foreignHashes.set(slot, record.tokenHash)
  }

  read(slot: number, key: string): PatRecord {
    const group = this.#groups[slot] as PatGroup
    const at = slot * TIME_FIELDS
    const times = this.#times
    const texts = this.#texts(slot)
    const ended = this.#ended.size === 0 ? undefined : this.#ended.get(slot)
    const product = this.#product.size === 0 ? NO_PRODUCT : (this.#product.get(slot) ?? NO_PRODUCT)
    return {
      id: texts.id,
      tokenHash: this.#foreignHashes.size === 0 ? key : (this.#foreignHashes.get(slot) ?? key),
      tenantId: group.tenantId,
      subject: texts.subject,
      name: this.#names[slot] as string,
      permissions: group.permissions,
      last4: texts.last4,
      createdAt: times[at] as number,
      expiresAt: orNull(times[at + 1] as number),
      revokedAt: ended === undefined ? null : ended.revokedAt,
      lastUsedAt: orNull(times[at + 2] as number),
      rotatedFrom: this.#rotatedFrom.size === 0 ? null : (this.#rotatedFrom.get(slot) ?? null),
      supersededAt: ended === undefined ? null : ended.supersededAt,
      graceUntil: ended === undefined ? null : ended.graceUntil,
      disabledAt: product.disabledAt,
      rateLimit: product.rateLimit,
      quota: product.quota,
      metadata: product.metadata,
      externalId: product.externalId,
    }
  }

  release(slot: number): void {
    this.#forgetMemo(slot)
    this.#names[slot] = undefined
    this.#groups[slot] = undefined
    this.#wide.delete(slot)
    this.#ended.delete(slot)
    this.#product.delete(slot)
    this.#rotatedFrom.delete(slot)
    this.#foreignHashes.delete(slot)
  }

  clear(): void {
    this.#names = []
    this.#groups = []
    this.#times = new Float64Array(0)
    this.#text = Buffer.alloc(0)
    this.#wide.clear()
    this.#memoSlots.fill(-1)
    this.#memoTexts.fill(undefined)
    this.#ended.clear()
    this.#product.clear()
    this.#rotatedFrom.clear()
    this.#foreignHashes.clear()
  }

  /** The slot's id, subject and last4: from the memo, else decoded (and memoised). */
  #texts(slot: number): PatTexts {
    const memo = slot & (MEMO_SIZE - 1)
    if (this.#memoSlots[memo] === slot) return this.#memoTexts[memo] as PatTexts
    const text = this.#text
    const at = slot * TEXT_BYTES
    const idEnd = at + 3 + (text[at] as number)
    const subjectEnd = idEnd + (text[at + 1] as number)
    const last4Length = text[at + 2] as number
    const texts =
      text[at] === WIDE
        ? (this.#wide.get(slot) as PatTexts)
        : {
            id: text.toString('latin1', at + 3, idEnd),
            subject: text.toString('latin1', idEnd, subjectEnd),
            last4:
              last4Length === 4
                ? String.fromCharCode(
                    text[subjectEnd] as number,
                    text[subjectEnd + 1] as number,
                    text[subjectEnd + 2] as number,
                    text[subjectEnd + 3] as number,
                  )
                : text.toString('latin1', subjectEnd, subjectEnd + last4Length),
          }
    this.#memoSlots[memo] = slot
    this.#memoTexts[memo] = texts
    return texts
  }

  #forgetMemo(slot: number): void {
    const memo = slot & (MEMO_SIZE - 1)
    if (this.#memoSlots[memo] !== slot) return
    this.#memoSlots[memo] = -1
    this.#memoTexts[memo] = undefined
  }

  /** Writes the three strings into the slot's text; false (marked WIDE) when they do not fit. */
  #writeText(slot: number, id: string, subject: string, last4: string): boolean {
    const text = this.#text
    const at = slot * TEXT_BYTES
    text[at] = WIDE
    if (3 + id.length + subject.length + last4.length > TEXT_BYTES) return false
    let to = at + 3
    for (const value of [id, subject, last4]) {
      for (let i = 0; i < value.length; i++) {
        const code = value.charCodeAt(i)
        if (code > 0xff) return false
        text[to++] = code
      }
    }
    text[at + 1] = subject.length
    text[at + 2] = last4.length
    text[at] = id.length
    return true
  }
}

function orNull(time: number): number | null {
  return Number.isNaN(time) ? null : time
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
