/**
 * The dialect layer every area's SQL is written over (DESIGN §18): statements are written
 * once, in Postgres' spelling (`$1` placeholders, `::type` casts, `GREATEST`/`LEAST`,
 * `FOR UPDATE`), and each store runs them through its own `SqlDb`. SQLite's rewrites the
 * text once per statement (sqlite.ts: `?1` placeholders, no casts, `max`/`min`, no row locks:
 * `BEGIN IMMEDIATE` already holds the write lock) and keeps it prepared; Postgres sends it as
 * is. What the text cannot say the same way is asked of the `Dialect` here: lists and
 * batches (one JSON parameter, read by `jsonb_array_elements` or `json_each`), booleans and
 * text arrays as each driver binds them.
 */

/** What differs between the databases beyond the statement text's rewrite. */
export interface Dialect {
  readonly kind: 'sqlite' | 'postgres'
  /** A boolean parameter as the driver binds it (SQLite: 1 or 0). */
  bool(value: boolean): unknown
  /** A text-array column's value (Postgres: `text[]`; SQLite: JSON text). */
  textArray(values: readonly string[]): unknown
  /**
   * The rows of the JSON array of arrays in parameter `param` (`batchParam`) as a derived
   * table `b` with columns c0, c1, … of the given Postgres types, in array order (`b.n`); a
   * `jsonb` column's element is a JSON value (an object), stored as its JSON text.
   */
  batch(param: string, types: readonly string[]): string
  /** `IN (…)` over the JSON array in parameter `param` (`listParam`). */
  inList(param: string): string
}

/** A batch's rows as the one parameter `Dialect.batch` reads. */
export const batchParam = (rows: readonly (readonly unknown[])[]): string => JSON.stringify(rows)
/** A list as the one parameter `Dialect.inList` reads. */
export const listParam = (values: readonly unknown[]): string => JSON.stringify(values)

/** One connection's view of a store's database (or of one of its transactions). */
export interface SqlDb {
  readonly dialect: Dialect
  /** Throws once the store is closed (for calls that have no statement to run). */
  checkOpen(): void
  /** The rows of one statement. */
  all<R extends object>(sql: string, params?: readonly unknown[]): Promise<R[]>
  /** How many rows one statement changed. */
  run(sql: string, params?: readonly unknown[]): Promise<number>
  /**
   * Inserts `rows` (values in `columns` order; a `jsonb` column's value a JSON value) in one
   * transaction, in order: one statement for the batch on Postgres (a round trip each),
   * multi-row `VALUES` statements of a few fixed sizes on SQLite, each prepared once
   * (cheaper than reading the batch from JSON, or than a statement per row).
   * `tail` follows the values (`ON CONFLICT …`, `RETURNING …`); the rows RETURNING gave.
   */
  insertRows<R extends object>(
    into: string,
    columns: readonly { readonly name: string; readonly type: string }[],
    rows: readonly (readonly unknown[])[],
    tail: string,
  ): Promise<R[]>
  /** Statements that see one state and commit together (inside a transaction: as part of it). */
  atomic<T>(work: (db: SqlDb) => Promise<T>): Promise<T>
  /**
   * Statements that change what instances cache (the change log's triggers log them), in one
   * transaction, delivered to this store's watchers before it resolves.
   */
  change<T>(work: (db: SqlDb) => Promise<T>): Promise<T>
}

/** `$1, $2, …` from `first` on, `count` of them, each with its Postgres cast when given. */
export function placeholders(first: number, types: readonly (string | undefined)[]): string {
  return types.map((type, i) => `$${first + i}${type ? `::${type}` : ''}`).join(', ')
}
