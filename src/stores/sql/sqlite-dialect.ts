/**
 * What SQLite does differently under the shared SQL (db.ts): its `Dialect`, the rewrite of a
 * statement written in Postgres' spelling, its constraint errors, and the turns a database
 * file's transactions take in one thread. sqlite.ts runs the statements.
 */
import { type ConstraintKind, translateConstraint } from '../rows.ts'
import type { Dialect } from './db.ts'

// SQLite extended result codes for the constraint violations we translate.
const SQLITE_CONSTRAINT_PRIMARYKEY = 1555
const SQLITE_CONSTRAINT_UNIQUE = 2067
const SQLITE_CONSTRAINT_FOREIGNKEY = 787

/** SQLite's `Dialect` (types are left to the columns' affinity). */
export const sqliteDialect: Dialect = {
  kind: 'sqlite',
  bool: (value) => (value ? 1 : 0),
  textArray: (values) => JSON.stringify(values),
  batch: (param, types) =>
    `(SELECT ${types.map((type, i) => `e.value ${type === 'jsonb' ? '->' : '->>'} ${i} AS c${i}`).join(', ')}, e.key AS n
      FROM json_each(${param}) AS e) AS b`,
  inList: (param) => `IN (SELECT value FROM json_each(${param}))`,
}

/**
 * The transaction open on each database file in this thread. node:sqlite is synchronous: a
 * statement on another connection to a file whose write lock is held here would block the
 * thread for the busy timeout, while the holder, awaiting between its statements, could not
 * finish. So in one thread a file's transactions take turns, and other statements wait.
 */
const open = new Map<string, Promise<void>>()

/** Whether a transaction is open on the file at `path` in this thread. */
export const whileOpen = (path: string): boolean => open.size > 0 && open.has(path)

/** Whether a statement writes (then it waits for another connection's open transaction). */
export const WRITES = /\b(INSERT|UPDATE|DELETE|REPLACE)\b/i

export async function waitTurn(path: string): Promise<void> {
  for (let held = open.get(path); held; held = open.get(path)) await held
}

/** Waits for the file's turn and takes it; the result gives it back. */
export async function turn(path: string): Promise<() => void> {
  // No await between the last check and the set: two waiters cannot both take the turn.
  for (let held = open.get(path); held; held = open.get(path)) await held
  let release = () => {}
  open.set(path, new Promise<void>((resolve) => (release = resolve)))
  return () => {
    open.delete(path)
    release()
  }
}

/** Runs a statement, translating SQLite's constraint errors (extended result codes). */
export function checked<T>(run: () => T): T {
  try {
    return run()
  } catch (error) {
    throw translateConstraint(error, constraintOf(error), 'a row')
  }
}

/**
 * A statement written for Postgres (sql/db.ts) as SQLite reads it: numbered `?N`
 * placeholders, no casts, `max`/`min` for `GREATEST`/`LEAST`, and no row locks (a
 * transaction here holds the database's write lock from its start: `BEGIN IMMEDIATE`).
 */
export function toSqlite(sql: string): string {
  return sql
    .replace(/\$(\d+)/g, '?$1')
    .replace(/::[a-z]+(\[\])?/g, '')
    .replace(/\bGREATEST\(/g, 'max(')
    .replace(/\bLEAST\(/g, 'min(')
    .replace(/\s+FOR UPDATE( SKIP LOCKED)?/g, '')
    .replace(/\bILIKE\b/g, 'LIKE')
}

function constraintOf(error: unknown): ConstraintKind {
  const code = (error as { errcode?: unknown }).errcode
  if (code === SQLITE_CONSTRAINT_PRIMARYKEY || code === SQLITE_CONSTRAINT_UNIQUE) return 'unique'
  if (code === SQLITE_CONSTRAINT_FOREIGNKEY) return 'foreign_key'
  return undefined
}
