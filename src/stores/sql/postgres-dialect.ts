/**
 * What Postgres does differently under the shared SQL (db.ts): its `Dialect` (lists and
 * batches read from one JSON parameter) and its constraint errors (SQLSTATE).
 */
import { type ConstraintKind, translateConstraint } from '../rows.ts'
import type { Dialect } from './db.ts'

const UNIQUE_VIOLATION = '23505'
const FOREIGN_KEY_VIOLATION = '23503'

/** Postgres' `Dialect`. */
export const postgresDialect: Dialect = {
  kind: 'postgres',
  bool: (value) => value,
  textArray: (values) => [...values],
  batch: (param, types) =>
    `(SELECT ${types.map((type, i) => (type === 'jsonb' ? `e.v->${i}` : `(e.v->>${i})::${type}`) + ` AS c${i}`).join(', ')}, e.n
      FROM jsonb_array_elements(${param}::jsonb) WITH ORDINALITY AS e(v, n)) AS b`,
  inList: (param) => `IN (SELECT jsonb_array_elements_text(${param}::jsonb))`,
}

/** Postgres constraint errors (SQLSTATE) as the Store contract states them. */
export function translate(error: unknown): unknown {
  const constraint = (error as { constraint?: string } | null)?.constraint
  return translateConstraint(error, constraintOf(error), `a row (${constraint ?? 'constraint'})`)
}

function constraintOf(error: unknown): ConstraintKind {
  const code = (error as { code?: unknown } | null)?.code
  if (code === UNIQUE_VIOLATION) return 'unique'
  if (code === FOREIGN_KEY_VIOLATION) return 'foreign_key'
  return undefined
}
