/**
 * What was built from a stored record, kept while that same record object keeps coming back
 * (a cached lookup, an in-memory map): a PAT's principal is then built once, not per request
 * (issue #36). Direct-mapped and bounded: `size` places, chosen from a string of the record
 * (a digest's first characters), each holding the last record seen there, so it holds nothing
 * per stored or cached key (issue #36's memory bound) and a miss costs two array writes.
 * A record edited in place is caught by the caller's `current` check.
 */
export interface RecordMemo<R extends object, V> {
  /** The value built for `record`, when `current` says it still describes it; else undefined. */
  get(record: R, current: (value: V, record: R) => boolean): V | undefined
  set(record: R, value: V): void
}

/**
 * @param size places, a power of two
 * @param keyOf a string of the record whose first three characters spread records over the
 *   places (a token digest); shorter strings all share place 0's neighbours, correctly but slowly
 */
export function createRecordMemo<R extends object, V>(
  size: number,
  keyOf: (record: R) => string,
): RecordMemo<R, V> {
  if (!Number.isInteger(size) || size <= 0 || (size & (size - 1)) !== 0) {
    throw new RangeError('createRecordMemo: size must be a power of two')
  }
  const mask = size - 1
  const records: (R | undefined)[] = new Array(size).fill(undefined)
  const values: (V | undefined)[] = new Array(size).fill(undefined)
  const placeOf = (record: R): number => {
    const key = keyOf(record)
    // NaN (a key shorter than three characters) | 0 is 0: still a place.
    return ((key.charCodeAt(0) * 961 + key.charCodeAt(1) * 31 + key.charCodeAt(2)) | 0) & mask
  }
  return {
    get(record, current) {
      const place = placeOf(record)
      if (records[place] !== record) return undefined
      const value = values[place] as V
      return current(value, record) ? value : undefined
    },
    set(record, value) {
      const place = placeOf(record)
      records[place] = record
      values[place] = value
    },
  }
}
