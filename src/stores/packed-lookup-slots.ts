/**
 * The lookup cache's found entries, packed: `PackedSlots` keeps each key in `KeyedSlots`
 * (typed arrays, recency order) and its expiry and last-touch time at that slot of two flat
 * arrays, the value at that slot of a `SlotValues` (as loaded, or in columns: `PatColumns`).
 * Why not a `Map` of keys to `{ value, expiresAt, touchedAt }` objects: with 100,000 cached
 * PATs the 64-character hash strings, the Map's table and those objects cost ~230 bytes a key
 * of long-lived heap; the slots cost ~80 bytes off the V8 heap and no allocation per miss.
 * The rules (what is cached, for how long) are lookup-cache-rules.ts'.
 */

import type { PatRecord } from '../core/ports.ts'
import { BoundedMemo } from '../lib/bounded-memo.ts'
import { fitSlots, KeyedSlots } from '../lib/keyed-slots.ts'
import type { CacheSlots } from './lookup-cache-rules.ts'

/**
 * Approximate LRU: a hit moves its entry to the most-recent end of the map (a `Map` delete +
 * set of a 64-character key) at most once per this many ms. Why: the move was ~1.4 % of a
 * PAT request's CPU (two per request, the PAT and its tenant) and bought nothing for a key
 * hit thousands of times a second. Eviction stays bounded by `maxEntries`; an entry hit
 * within the last second may only be evicted a little earlier than under exact LRU.
 */
const TOUCH_INTERVAL_MS = 1000

/** Where the found values of a cache live, by slot. */
export interface SlotValues<V> {
  /** Room for slots 0 .. capacity - 1. */
  reserve(capacity: number): void
  write(slot: number, key: string, value: V): void
  /** The value written at `slot` for `key` (the key it is found under). */
  read(slot: number, key: string): V
  release(slot: number): void
  clear(): void
}

/** The values as loaded, one reference per slot (tenants: few, and shared with nobody). */
export class PlainValues<V> implements SlotValues<V> {
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

/** Found entries in slots, bounded by `maxEntries` (least recently used evicted first). */
export class PackedSlots<V> implements CacheSlots<V> {
  readonly #maxEntries: number
  // The oldest key is the least recently used (to within `TOUCH_INTERVAL_MS`).
  readonly #keys: KeyedSlots
  readonly #values: SlotValues<V>
  #expiresAt = new Float64Array(0)
  #touchedAt = new Float64Array(0)

  /** @param values where values are kept (e.g. `PatColumns`); default: as loaded */
  constructor(maxEntries: number, values: SlotValues<V> = new PlainValues<V>()) {
    this.#maxEntries = maxEntries
    this.#values = values
    // 32 bytes: a SHA-256 hex key packed; shorter keys (tenant ids) one byte a character.
    this.#keys = new KeyedSlots(maxEntries, 32)
  }

  get size(): number {
    return this.#keys.size
  }

  get(key: string, now: number): V | undefined {
    const slot = this.#keys.find(key)
    if (slot === -1) return undefined
    if ((this.#expiresAt[slot] as number) > now) {
      if (now - (this.#touchedAt[slot] as number) >= TOUCH_INTERVAL_MS) {
        this.#keys.touch(slot)
        this.#touchedAt[slot] = now
      }
      return this.#values.read(slot, key)
    }
    this.#deleteSlot(slot)
    return undefined
  }

  set(key: string, value: V, expiresAt: number, now: number): void {
    const keys = this.#keys
    let slot = keys.find(key)
    if (slot === -1) {
      if (keys.size >= this.#maxEntries) this.#deleteSlot(keys.oldest())
      slot = keys.add(key)
      this.#expiresAt = fitSlots(this.#expiresAt, keys)
      this.#touchedAt = fitSlots(this.#touchedAt, keys)
      this.#values.reserve(keys.capacity)
    } else {
      keys.touch(slot)
    }
    this.#values.write(slot, key, value)
    this.#expiresAt[slot] = expiresAt
    this.#touchedAt[slot] = now
  }

  delete(key: string): void {
    const slot = this.#keys.find(key)
    if (slot !== -1) this.#deleteSlot(slot)
  }

  clear(): void {
    this.#keys.clear()
    this.#values.clear()
    this.#expiresAt = new Float64Array(0)
    this.#touchedAt = new Float64Array(0)
  }

  #deleteSlot(slot: number): void {
    this.#keys.delete(slot)
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
export class Interner {
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
  readonly certificateThumbprint: string | null
}

const NO_PRODUCT: ProductFields = Object.freeze({
  disabledAt: null,
  rateLimit: null,
  quota: null,
  metadata: null,
  externalId: null,
  certificateThumbprint: null,
})

/**
 * `PatColumns`' text column, per slot: the lengths of the id, subject and last4, then their
 * characters, one byte each (Latin-1). A PAT id (`tok_` + 20) and last4 leave 33 for the subject.
 */
const TEXT_BYTES = 64

/** Marks a slot whose text did not fit `TEXT_BYTES` (or had a wider character): see `#wide`. */
const WIDE = 255

/**
 * Records built lately, by slot modulo this (a power of two): the hits of a busy token are
 * answered with the one frozen record built at its first hit instead of a new ~20-field object
 * and its decoded strings each time, for ~250 KB of heap at most (not one per cached key).
 */
const MEMO_SIZE = 1024

/**
 * Cached PATs in columns: per slot, the id, subject and last 4 characters as bytes, the name
 * (interned) and a shared `PatGroup` (tenant id and permissions), and three times in one
 * Float64Array (the rare revocation and rotation times aside). A hit builds the record from
 * them, frozen (with its permission list, shared), so nobody can change what another caller
 * is given; the last 1,024 slots' records are kept and handed out again until their slot is
 * written or released. The token hash is the key the record was found under (a record whose
 * hash differs from it, a store bug the core checks for, keeps its own).
 * Why: a record object kept per token, with its boxed times, cost ~170 bytes a token in
 * cache (as frozen, interned objects; ~680 as the store returns them), three heap strings per
 * token ~120 more; the columns cost ~105 bytes, 16 of them on the V8 heap. The price is one
 * short-lived object and two or three short strings per hit outside the memo.
 */
export class PatColumns implements SlotValues<PatRecord> {
  readonly #interner: Interner
  #names: (string | undefined)[] = []
  #groups: (PatGroup | undefined)[] = []
  #times = new Float64Array(0)
  #text = Buffer.alloc(0)
  // Rare values, kept aside rather than in a column that would be empty almost everywhere.
  readonly #wide = new Map<number, PatTexts>()
  readonly #ended = new Map<number, EndTimes>()
  readonly #product = new Map<number, ProductFields>()
  /** Records built lately, by slot (`bounded-memo.ts`): forgotten when the slot changes. */
  readonly #memo = new BoundedMemo<number, PatRecord>(MEMO_SIZE)
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
    this.#memo.forget(slot, slot)
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
      certificateThumbprint: record.certificateThumbprint ?? null,
    }
    if (Object.values(product).every((value) => value === null)) this.#product.delete(slot)
    else this.#product.set(slot, product)
    if (record.tokenHash === key) this.#foreignHashes.delete(slot)
    else this.#foreignHashes.set(slot, record.tokenHash)
  }

  read(slot: number, key: string): PatRecord {
    const known = this.#memo.get(slot, slot)
    if (known !== undefined) return known
    const record = this.#build(slot, key)
    this.#memo.set(slot, slot, record)
    return record
  }

  #build(slot: number, key: string): PatRecord {
    const group = this.#groups[slot] as PatGroup
    const at = slot * TIME_FIELDS
    const times = this.#times
    const texts = this.#texts(slot)
    const ended = this.#ended.size === 0 ? undefined : this.#ended.get(slot)
    const product = this.#product.size === 0 ? NO_PRODUCT : (this.#product.get(slot) ?? NO_PRODUCT)
    return Object.freeze({
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
      certificateThumbprint: product.certificateThumbprint,
    })
  }

  release(slot: number): void {
    this.#memo.forget(slot, slot)
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
    this.#memo.clear()
    this.#ended.clear()
    this.#product.clear()
    this.#rotatedFrom.clear()
    this.#foreignHashes.clear()
  }

  /** The slot's id, subject and last4, decoded. */
  #texts(slot: number): PatTexts {
    const text = this.#text
    const at = slot * TEXT_BYTES
    const idEnd = at + 3 + (text[at] as number)
    const subjectEnd = idEnd + (text[at + 1] as number)
    const last4Length = text[at + 2] as number
    return text[at] === WIDE
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
