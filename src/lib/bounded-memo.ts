/**
 * A value built from a key, kept while the same key comes back (issue #36): a cached PAT's
 * frozen record per lookup-cache slot, its principal per record object. Direct-mapped and
 * bounded: `size` places, the caller naming the place from the key (a slot number, a digest's
 * characters), each holding the last key put there and its value. So it holds nothing per
 * stored or cached key (issue #36's memory bound), a hit is one comparison and a miss two
 * array writes. Keys are compared by identity (`===`); a value that may go stale while its
 * key stays is checked by the caller, or forgotten when the key's data changes.
 */
export class BoundedMemo<K, V> {
  readonly #mask: number
  readonly #keys: (K | undefined)[]
  readonly #values: (V | undefined)[]

  /** @param size places, a power of two */
  constructor(size: number) {
    if (!Number.isInteger(size) || size <= 0 || (size & (size - 1)) !== 0) {
      throw new RangeError('BoundedMemo: size must be a power of two')
    }
    this.#mask = size - 1
    this.#keys = new Array(size).fill(undefined)
    this.#values = new Array(size).fill(undefined)
  }

  /** The value put for `key` at `place`, unless another key took the place since. */
  get(key: K, place: number): V | undefined {
    const at = place & this.#mask
    return this.#keys[at] === key ? this.#values[at] : undefined
  }

  set(key: K, place: number, value: V): void {
    const at = place & this.#mask
    this.#keys[at] = key
    this.#values[at] = value
  }

  /** Drops `key`'s value (its data changed), if it still holds its place. */
  forget(key: K, place: number): void {
    const at = place & this.#mask
    if (this.#keys[at] !== key) return
    this.#keys[at] = undefined
    this.#values[at] = undefined
  }

  clear(): void {
    this.#keys.fill(undefined)
    this.#values.fill(undefined)
  }
}

/**
 * A place for a key that is (or starts with) a digest: its first three characters, which are
 * random. Shorter strings share place 0 (NaN | 0 is 0): correct, only slower.
 */
export function digestPlace(digest: string): number {
  return (digest.charCodeAt(0) * 961 + digest.charCodeAt(1) * 31 + digest.charCodeAt(2)) | 0
}
