export type {
  AdminRole,
  AdminStore,
  AdminTokenRecord,
  AuditSearch,
  PatSearch,
} from './store.ts'

/** `%`, `_` and `\` taken literally in a LIKE pattern (escape character `\`). */
export function likeContains(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`
}

/**
 * WHERE clauses and their parameters, in order; each `?` in a clause becomes the dialect's
 * placeholder for the next parameter (`?` in SQLite, `$n` in Postgres).
 */
export function createWhere(placeholder: (n: number) => string) {
  const clauses: string[] = []
  const params: unknown[] = []
  return {
    params,
    add(sql: string, ...values: unknown[]) {
      let i = 0
      clauses.push(sql.replace(/\?/g, () => placeholder(params.length + ++i)))
      params.push(...values)
    },
    sql: () => (clauses.length > 0 ? `WHERE ${clauses.join(' AND ')}` : ''),
  }
}

export type Where = ReturnType<typeof createWhere>
