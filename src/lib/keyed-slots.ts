import { randomBytes } from 'node:crypto'

/**
 * A bounded map from string keys to small integer slots, in least-recently-used order, held
 * in typed arrays: an open-addressing index (linear probing over an Int32Array) and, per slot,
 * the key's bytes, its hash and two links of a doubly linked recency list. Callers keep their
 * per-key values at the slot's index of their own typed arrays (`capacity` long).
 *
 * Why not a `Map<string, number>`: with 100,000 keys (cached PATs, per-token counters) each
 * key is a heap string (~80 bytes for a 64-character hash) and a Map entry (~24 bytes, twice
 * that once deletions leave its table half dead), all long-lived objects the old generation
 * has to hold and trace. Here a key costs `keyBytes` + ~25 bytes off the V8 heap.
 *
 * Keys are stored inline when they fit: in a table whose `keyBytes` is a multiple of 4, a key
 * of exactly `2 × keyBytes` lowercase hex characters (a SHA-256 digest in a 32-byte table) is
 * packed two characters to a byte, compared and hashed as 32-bit words; any other key of at
 * most `keyBytes` characters, all below U+0100, is stored one byte per character. Other keys
 * (longer, or with wider characters) live in a side `Map` with the same slots, recency and
 * bound, so every string key works, only slower.
 *
 * Hash flooding: the probe start is a seeded hash of the whole key, the seed random per
 * table, so a client choosing keys (an address key of the failed-authentication limit) cannot
 * precompute keys that share a probe chain.
 */
export class KeyedSlots {
  readonly #maxEntries: number
  readonly #keyBytes: number
  readonly #seed: number
  #capacity = 0
  #size = 0
  /** Slots handed out so far; slots below it are in use or on the free list. */
  #used = 0
  /** Head of the free list of released slots (linked through `#next`), -1 when empty. */
  #free = NONE
  /** Index positions -> slot, or EMPTY / DELETED. Length: a power of two ≥ 2 × capacity. */
  #index = new Int32Array(0)
  #deleted = 0
  #keys = new Uint8Array(0)
  /** `#keys` as 32-bit words, where packed hex keys are read and written. */
  #keyWords = new Int32Array(0)
  /** Words per packed hex key; 0 when `keyBytes` is not a multiple of 4 (nothing is packed). */
  readonly #hexWords: number
  /** What `#scan` found: the key's hash (a hex key's words are in `PARSED`). */
  #scanHash = 0
  /**
   * The key `find` or `add` last answered for, and its slot or -1: a caller asking again for
   * the same key (the known-credentials check, then its refresh, on one request's digest; an
   * address's failed-authentication count read, then counted) skips the scan and the probe.
   * Forgotten when that slot is deleted; `add` replaces it, so a remembered miss never
   * outlives the key's arrival.
   */
  #lastKey: string | undefined
  #lastSlot = NONE
  /** Per slot: the key's length (inline), HEX (packed) or SIDE (in `#side`). */
  #lengths = new Uint8Array(0)
  #hashes = new Int32Array(0)
  #prev = new Int32Array(0)
  #next = new Int32Array(0)
  #oldest = NONE
  #newest = NONE
  readonly #side = new Map<string, number>()
  readonly #sideKeys = new Map<number, string>()

  /**
   * @param maxEntries keys held at most (`add` beyond it throws: evict `oldest()` first)
   * @param keyBytes inline bytes per key, at most 250
   */
  constructor(maxEntries: number, keyBytes: number) {
    if (!Number.isSafeInteger(maxEntries) || maxEntries < 1) {
      throw new RangeError('maxEntries must be >= 1')
    }
    if (!Number.isInteger(keyBytes) || keyBytes < 1 || keyBytes > 250) {
      throw new RangeError('keyBytes must be in 1..250')
    }
    this.#maxEntries = maxEntries
    this.#keyBytes = keyBytes
    this.#hexWords = keyBytes % 4 === 0 ? keyBytes / 4 : 0
    this.#seed = randomBytes(4).readInt32LE(0)
  }

  /** Keys held now. */
  get size(): number {
    return this.#size
  }

  /** Slots are below this number: the length a caller's per-slot arrays need. */
  get capacity(): number {
    return this.#capacity
  }

  /** The key's slot, or -1. */
  find(key: string): number {
    if (key === this.#lastKey) return this.#lastSlot
    const slot = this.#lookUp(key)
    this.#lastKey = key
    this.#lastSlot = slot
    return slot
  }

  #lookUp(key: string): number {
    const form = this.#scan(key)
    if (form === SIDE) return this.#side.get(key) ?? NONE
    const hash = this.#scanHash
    const index = this.#index
    const mask = index.length - 1
    if (mask < 0) return NONE
    for (let at = hash & mask; ; at = (at + 1) & mask) {
      const slot = index[at] as number
      if (slot === EMPTY) return NONE
      if (slot !== DELETED && this.#hashes[slot] === hash && this.#matches(slot, key, form)) {
        return slot
      }
    }
  }

  /**
   * Adds a key that is not held (check with `find` first) as the most recently used one and
   * returns its slot. Throws when `maxEntries` keys are held.
   */
  add(key: string): number {
    if (this.#size >= this.#maxEntries) throw new RangeError('KeyedSlots is full')
    const form = this.#scan(key)
    const hash = this.#scanHash
    const slot = this.#take()
    this.#lengths[slot] = form
    if (form === SIDE) {
      this.#side.set(key, slot)
      this.#sideKeys.set(slot, key)
    } else {
      this.#store(slot, key, form)
      this.#hashes[slot] = hash
      // Too many DELETED marks make misses probe long: rebuild (before `slot` is linked).
      if ((this.#size + 1 + this.#deleted) * 4 > this.#index.length * 3) {
        this.#rebuild(this.#index.length)
      }
      this.#place(slot, hash)
    }
    this.#size++
    this.#link(slot)
    this.#lastKey = key
    this.#lastSlot = slot
    return slot
  }

  /** Removes the key held at `slot` (a slot `find` or `add` returned and not deleted since). */
  delete(slot: number): void {
    if (slot === this.#lastSlot) this.#lastKey = undefined
    this.#unlink(slot)
    this.#size--
    if (this.#lengths[slot] === SIDE) {
      const key = this.#sideKeys.get(slot) as string
      this.#sideKeys.delete(slot)
      this.#side.delete(key)
    } else {
      const index = this.#index
      const mask = index.length - 1
      for (let at = (this.#hashes[slot] as number) & mask; ; at = (at + 1) & mask) {
        if (index[at] === slot) {
          index[at] = DELETED
          this.#deleted++
          break
        }
      }
    }
    this.#next[slot] = this.#free
    this.#free = slot
  }

  /** Makes the key at `slot` the most recently used. */
  touch(slot: number): void {
    if (slot === this.#newest) return
    this.#unlink(slot)
    this.#link(slot)
  }

  /** The least recently used key's slot (added or touched longest ago), or -1 when empty. */
  oldest(): number {
    return this.#oldest
  }

  /** The key held at `slot`. */
  keyAt(slot: number): string {
    const form = this.#lengths[slot] as number
    if (form === SIDE) return this.#sideKeys.get(slot) as string
    let key = ''
    if (form === HEX) {
      const words = this.#keyWords
      const at = slot * this.#hexWords
      for (let i = 0; i < this.#hexWords; i++) {
        const word = words[at + i] as number
        for (let shift = 28; shift >= 0; shift -= 4) key += HEX_DIGITS[(word >>> shift) & 15]
      }
    } else {
      const keys = this.#keys
      const at = slot * this.#keyBytes
      for (let i = 0; i < form; i++) key += String.fromCharCode(keys[at + i] as number)
    }
    return key
  }

  /** Forgets every key and gives the arrays back (they grow again as keys are added). */
  clear(): void {
    this.#capacity = 0
    this.#size = 0
    this.#used = 0
    this.#free = NONE
    this.#index = new Int32Array(0)
    this.#deleted = 0
    this.#keys = new Uint8Array(0)
    this.#keyWords = new Int32Array(0)
    this.#lengths = new Uint8Array(0)
    this.#hashes = new Int32Array(0)
    this.#prev = new Int32Array(0)
    this.#next = new Int32Array(0)
    this.#oldest = NONE
    this.#newest = NONE
    this.#lastKey = undefined
    this.#side.clear()
    this.#sideKeys.clear()
  }

  /**
   * The key's form (HEX, SIDE, or its length when stored one byte per character) and, unless
   * SIDE, its hash in `#scanHash` (a hex key's words in `PARSED`): seeded 32-bit FNV-1a over
   * the characters (or a hex key's words), MurmurHash3's fmix32 at the end.
   */
  #scan(key: string): number {
    const length = key.length
    const words = this.#hexWords
    if (words === 0 || length !== words * 8) return this.#scanBytes(key, length)
    if (key !== parsedKey && !parseHex(key, words)) return this.#scanBytes(key, length)
    let hash = this.#seed ^ 0x811c9dc5
    for (let w = 0; w < words; w++) hash = Math.imul(hash ^ (PARSED[w] as number), 0x01000193)
    this.#scanHash = mix(hash)
    return HEX
  }

  #scanBytes(key: string, length: number): number {
    if (length > this.#keyBytes) return SIDE
    let hash = this.#seed ^ 0x811c9dc5
    for (let i = 0; i < length; i++) {
      const code = key.charCodeAt(i)
      if (code > 0xff) return SIDE
      hash = Math.imul(hash ^ code, 0x01000193)
    }
    this.#scanHash = mix(hash)
    return length
  }

  /** Whether `slot` holds `key`, of the form `#scan` just found (its words in `PARSED`). */
  #matches(slot: number, key: string, form: number): boolean {
    if (this.#lengths[slot] !== form) return false
    if (form === HEX) {
      const words = this.#keyWords
      const count = this.#hexWords
      const at = slot * count
      for (let i = 0; i < count; i++) if (words[at + i] !== PARSED[i]) return false
      return true
    }
    const keys = this.#keys
    const at = slot * this.#keyBytes
    for (let i = 0; i < form; i++) if (keys[at + i] !== key.charCodeAt(i)) return false
    return true
  }

  /** Writes the key `#scan` just read into `slot`. */
  #store(slot: number, key: string, form: number): void {
    if (form === HEX) {
      const words = this.#keyWords
      const count = this.#hexWords
      const at = slot * count
      for (let i = 0; i < count; i++) words[at + i] = PARSED[i] as number
      return
    }
    const keys = this.#keys
    const at = slot * this.#keyBytes
    for (let i = 0; i < form; i++) keys[at + i] = key.charCodeAt(i)
  }

  #place(slot: number, hash: number): void {
    const index = this.#index
    const mask = index.length - 1
    for (let at = hash & mask; ; at = (at + 1) & mask) {
      const held = index[at] as number
      if (held === EMPTY || held === DELETED) {
        if (held === DELETED) this.#deleted--
        index[at] = slot
        return
      }
    }
  }

  /** A new index of `length` positions holding every inline slot, no DELETED marks. */
  #rebuild(length: number): void {
    this.#index = new Int32Array(length).fill(EMPTY)
    this.#deleted = 0
    for (let slot = this.#oldest; slot !== NONE; slot = this.#next[slot] as number) {
      if (this.#lengths[slot] !== SIDE) this.#place(slot, this.#hashes[slot] as number)
    }
  }

  #take(): number {
    const free = this.#free
    if (free !== NONE) {
      this.#free = this.#next[free] as number
      return free
    }
    const slot = this.#used++
    if (slot === this.#capacity) this.#grow()
    return slot
  }

  /** Doubles the per-slot arrays (at least 64 slots, at most `maxEntries`). */
  #grow(): void {
    const capacity = Math.min(Math.max(64, this.#capacity * 2), this.#maxEntries)
    this.#keys = grown(this.#keys, capacity * this.#keyBytes)
    this.#keyWords = new Int32Array(this.#keys.buffer)
    this.#lengths = grown(this.#lengths, capacity)
    this.#hashes = grown(this.#hashes, capacity)
    this.#prev = grown(this.#prev, capacity)
    this.#next = grown(this.#next, capacity)
    this.#capacity = capacity
    let length = 8
    while (length < capacity * 2) length *= 2
    this.#rebuild(length)
  }

  #link(slot: number): void {
    const newest = this.#newest
    this.#prev[slot] = newest
    this.#next[slot] = NONE
    if (newest === NONE) this.#oldest = slot
    else this.#next[newest] = slot
    this.#newest = slot
  }

  #unlink(slot: number): void {
    const prev = this.#prev[slot] as number
    const next = this.#next[slot] as number
    if (prev === NONE) this.#oldest = next
    else this.#next[prev] = next
    if (next === NONE) this.#newest = prev
    else this.#prev[next] = prev
  }
}

const NONE = -1
const EMPTY = -1
const DELETED = -2
/** `#lengths` markers: a packed hex key, a key in the side map (both above 250). */
const HEX = 255
const SIDE = 254

const HEX_DIGITS = '0123456789abcdef'
/** Char code -> value of a lowercase hex digit, -1 for any other character below 128. */
const HEX_VALUES = new Int8Array(128).fill(-1)
for (let i = 0; i < 16; i++) HEX_VALUES[HEX_DIGITS.charCodeAt(i)] = i

/**
 * The hex key parsed last, by any table, and its 32-bit words: one request's digest is looked
 * up in several tables (known credentials, the lookup cache), each with its own seed, and
 * only the hashing over the words is per table. A table reads `PARSED` right after its own
 * `#scan`, before anything else can parse (single-threaded, no await in between).
 */
let parsedKey: string | undefined
const PARSED = new Int32Array(62)

/** Parses `words` × 8 lowercase hex characters into `PARSED`; false (and nothing kept) if not hex. */
function parseHex(key: string, words: number): boolean {
  parsedKey = undefined
  let at = 0
  for (let w = 0; w < words; w++) {
    let word = 0
    for (let end = at + 8; at < end; at++) {
      const code = key.charCodeAt(at)
      const value = code < 128 ? (HEX_VALUES[code] as number) : -1
      if (value < 0) return false
      word = (word << 4) | value
    }
    PARSED[w] = word
  }
  parsedKey = key
  return true
}

/** MurmurHash3's fmix32: every input bit moves every output bit (the index uses the low ones). */
function mix(hash: number): number {
  let h = Math.imul(hash ^ (hash >>> 16), 0x85ebca6b)
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
  return h ^ (h >>> 16)
}

/**
 * A caller's per-slot array with room for every slot of `slots`: `array` itself, or a copy
 * grown to `slots.capacity` after `add` grew the table.
 */
export function fitSlots<T extends Float64Array | Int32Array>(array: T, slots: KeyedSlots): T {
  return array.length >= slots.capacity ? array : grown(array, slots.capacity)
}

function grown<T extends Uint8Array | Int32Array | Float64Array>(array: T, length: number): T {
  const bigger = new (array.constructor as new (length: number) => T)(length)
  bigger.set(array)
  return bigger
}
