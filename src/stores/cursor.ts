/**
 * Keyset pagination shared by every store: lists are ordered newest first by a time column,
 * ties broken by id (descending), and a page continues strictly after the last row shown.
 * Unlike OFFSET, a keyset page costs the same at row 10 and row 1,000,000, and inserts
 * between two page requests never shift rows into a duplicate or a gap.
 *
 * The cursor is `base64url(JSON [time, id])`. It is opaque to callers but not secret and not
 * signed: every list query still filters by the caller's tenant, so a forged cursor can
 * only choose a position inside data the caller may already see.
 */
import type { Page } from './store.ts'

/** Position of the last row of a page: its time (epoch ms) and id. */
export interface CursorPosition {
  readonly at: number
  readonly id: string
}

/** A cursor that was not produced by `encodeCursor` (callers answer 400, not 500). */
export class InvalidCursorError extends Error {
  override readonly name = 'InvalidCursorError'
}

/** A page size outside `1..MAX_PAGE_LIMIT`, or not an integer. */
export class InvalidPageLimitError extends RangeError {
  override readonly name = 'InvalidPageLimitError'
}

/** Upper bound on one page, whatever the caller asks; the HTTP layer has its own, lower one. */
export const MAX_PAGE_LIMIT = 1000

// Bounds what a caller-supplied cursor may make us parse.
const MAX_CURSOR_LENGTH = 512

export function encodeCursor(position: CursorPosition): string {
  return Buffer.from(JSON.stringify([position.at, position.id]), 'utf8').toString('base64url')
}

/** Throws InvalidCursorError for anything `encodeCursor` could not have produced. */
export function decodeCursor(cursor: string): CursorPosition {
  if (cursor.length === 0 || cursor.length > MAX_CURSOR_LENGTH || !/^[\w-]+$/.test(cursor)) {
    throw new InvalidCursorError('malformed cursor')
  }
  let value: unknown
  try {
    value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
  } catch {
    throw new InvalidCursorError('malformed cursor')
  }
  if (
    !Array.isArray(value) ||
    value.length !== 2 ||
    !Number.isSafeInteger(value[0]) ||
    typeof value[1] !== 'string' ||
    value[1].length === 0
  ) {
    throw new InvalidCursorError('malformed cursor')
  }
  return { at: value[0] as number, id: value[1] }
}

/** Validates a requested page size; throws InvalidPageLimitError. */
export function checkPageLimit(limit: number): number {
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_PAGE_LIMIT) {
    throw new InvalidPageLimitError(`page limit must be an integer in 1..${MAX_PAGE_LIMIT}`)
  }
  return limit
}

/**
 * Builds a page from rows fetched with `LIMIT limit + 1`: the extra row only tells whether
 * another page exists, and is not returned.
 *
 * @example
 *   const rows = select(..., limit + 1)
 *   return toPage(rows.map(toRecord), limit, (r) => ({ at: r.createdAt, id: r.id }))
 */
export function toPage<T>(
  rows: readonly T[],
  limit: number,
  positionOf: (item: T) => CursorPosition,
): Page<T> {
  if (rows.length <= limit) return { items: rows, nextCursor: null }
  const items = rows.slice(0, limit)
  const last = items[items.length - 1] as T
  return { items, nextCursor: encodeCursor(positionOf(last)) }
}
