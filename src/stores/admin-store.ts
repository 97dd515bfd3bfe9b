import { checkPageLimit, decodeCursor, toPage } from './cursor.ts'
import type { AuditSearch, Page, PageRequest, PatSearch } from './store.ts'

export type {
  AdminRole,
  AdminStore,
  AdminTokenRecord,
  AuditSearch,
  ConsoleSessionRecord,
  PatSearch,
} from './store.ts'

/** `%`, `_` and `\` taken literally in a LIKE pattern (escape character `\`). */
export function likeContains(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`
}

/**
 * WHERE clauses and their parameters, in order; each `?` in a clause becomes the next
 * numbered placeholder (`$n`, as the shared SQL writes them: sql/db.ts).
 */
export function createWhere() {
  const clauses: string[] = []
  const params: unknown[] = []
  return {
    params,
    add(sql: string, ...values: unknown[]) {
      let i = 0
      clauses.push(sql.replace(/\?/g, () => `$${params.length + ++i}`))
      params.push(...values)
    },
    sql: () => (clauses.length > 0 ? `WHERE ${clauses.join(' AND ')}` : ''),
  }
}

export type Where = ReturnType<typeof createWhere>

/**
 * The PAT search's filters. ILIKE matches case-insensitively for ASCII; SQLite's LIKE does,
 * and its rewrite of the statement spells it so (sqlite.ts `toSqlite`).
 */
export function addPatSearch(where: Where, search: PatSearch): void {
  const like = 'ILIKE'
  if (search.tenantId !== undefined) where.add('tenant_id = ?', search.tenantId)
  if (search.subject) where.add(`subject ${like} ? ESCAPE '\\'`, likeContains(search.subject))
  if (search.name) where.add(`name ${like} ? ESCAPE '\\'`, likeContains(search.name))
  if (search.last4) where.add('last4 = ?', search.last4)
  if (search.externalId !== undefined) where.add('external_id = ?', search.externalId)
  if (search.expiringBefore !== undefined) {
    where.add(
      'expires_at IS NOT NULL AND revoked_at IS NULL AND expires_at < ?',
      search.expiringBefore,
    )
  }
}

/** The audit search's filters (the same in both dialects). */
export function addAuditSearch(where: Where, search: AuditSearch): void {
  if (search.tenantId !== undefined) where.add('tenant_id = ?', search.tenantId)
  if (search.type !== undefined) where.add('type = ?', search.type)
  if (search.actor !== undefined) where.add('actor = ?', search.actor)
  if (search.since !== undefined) where.add('time >= ?', search.since)
  if (search.until !== undefined) where.add('time < ?', search.until)
}

/**
 * One page of a search, newest first, keyset-paginated by (`timeColumn`, id): `select` is
 * the dialect's `SELECT … FROM …`, `run` its query. One row past the page tells whether
 * another follows.
 */
export async function searchPage<R, T>(
  run: (sql: string, params: readonly unknown[]) => Promise<R[]>,
  select: string,
  timeColumn: string,
  where: Where,
  page: PageRequest,
  map: (row: R) => T,
  positionOf: (item: T) => { at: number; id: string },
): Promise<Page<T>> {
  const limit = checkPageLimit(page.limit)
  if (page.cursor !== undefined) {
    const after = decodeCursor(page.cursor)
    where.add(`(${timeColumn}, id) < (?, ?)`, after.at, after.id)
  }
  where.params.push(limit + 1)
  const rows = await run(
    `${select} ${where.sql()} ORDER BY ${timeColumn} DESC, id DESC LIMIT $${where.params.length}`,
    where.params,
  )
  return toPage(rows.map(map), limit, positionOf)
}
