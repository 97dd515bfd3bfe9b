import type { DatabaseSync, SQLInputValue } from 'node:sqlite'
import type { PatRecord } from '../core/ports.ts'
import {
  type AdminRole,
  type AdminStore,
  type AdminTokenRecord,
  type AuditSearch,
  likeContains,
} from './admin-store.ts'
import { checkPageLimit, decodeCursor, toPage } from './cursor.ts'
import { AUDIT_COLUMNS, type AuditRow, PAT_COLUMNS, type PatRow, toAudit, toPat } from './rows.ts'
import { type AuditEvent, ConflictError, type Page, type PageRequest } from './store.ts'

interface AdminTokenRow {
  id: string
  token_hash: string
  name: string
  role: string
  last4: string
  created_at: number
  expires_at: number
  revoked_at: number | null
}

const SQLITE_CONSTRAINT_PRIMARYKEY = 1555
const SQLITE_CONSTRAINT_UNIQUE = 2067

/**
 * The SQLite `AdminStore`, over the store's connection (`db()` throws once it is closed).
 * Statements are prepared per call: operator actions are rare, and preparing after the
 * store migrated keeps this file independent of the store's statement cache.
 */
export function createSqliteAdminStore(db: () => DatabaseSync): AdminStore {
  return {
    async insertAdminToken(record) {
      try {
        db()
          .prepare(`INSERT INTO admin_tokens (id, token_hash, name, role, last4, created_at,
            expires_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
          .run(
            record.id,
            record.tokenHash,
            record.name,
            record.role,
            record.last4,
            record.createdAt,
            record.expiresAt,
            record.revokedAt,
          )
      } catch (error) {
        const code = (error as { errcode?: number }).errcode
        if (code === SQLITE_CONSTRAINT_PRIMARYKEY || code === SQLITE_CONSTRAINT_UNIQUE) {
          throw new ConflictError(`admin token ${record.id} already exists`, { cause: error })
        }
        throw error
      }
    },
    async findAdminTokenByHash(tokenHash) {
      const row = db().prepare('SELECT * FROM admin_tokens WHERE token_hash = ?').get(tokenHash)
      return row && toAdminToken(row as unknown as AdminTokenRow)
    },
    async listAdminTokens() {
      const rows = db().prepare('SELECT * FROM admin_tokens ORDER BY created_at DESC, id DESC')
      return (rows.all() as unknown as AdminTokenRow[]).map(toAdminToken)
    },
    async revokeAdminToken(id, at) {
      const row = db()
        .prepare(`UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?
          RETURNING *`)
        .get(at, id)
      return row && toAdminToken(row as unknown as AdminTokenRow)
    },
    async searchPats(search, page) {
      const where: string[] = []
      const params: SQLInputValue[] = []
      const add = (sql: string, value: SQLInputValue) => {
        where.push(sql)
        params.push(value)
      }
      if (search.tenantId !== undefined) add('tenant_id = ?', search.tenantId)
      if (search.subject) add("subject LIKE ? ESCAPE '\\'", likeContains(search.subject))
      if (search.name) add("name LIKE ? ESCAPE '\\'", likeContains(search.name))
      if (search.last4) add('last4 = ?', search.last4)
      if (search.expiringBefore !== undefined) {
        add(
          'expires_at IS NOT NULL AND revoked_at IS NULL AND expires_at < ?',
          search.expiringBefore,
        )
      }
      return pageOf<PatRow, PatRecord>(
        db(),
        `SELECT ${PAT_COLUMNS} FROM pats`,
        'created_at',
        where,
        params,
        page,
        toPat,
        (p) => ({ at: p.createdAt, id: p.id }),
      )
    },
    async searchAudit(search: AuditSearch, page) {
      const where: string[] = []
      const params: SQLInputValue[] = []
      const add = (sql: string, value: SQLInputValue) => {
        where.push(sql)
        params.push(value)
      }
      if (search.tenantId !== undefined) add('tenant_id = ?', search.tenantId)
      if (search.type !== undefined) add('type = ?', search.type)
      if (search.actor !== undefined) add('actor = ?', search.actor)
      if (search.since !== undefined) add('time >= ?', search.since)
      if (search.until !== undefined) add('time < ?', search.until)
      return pageOf<AuditRow, AuditEvent>(
        db(),
        `SELECT ${AUDIT_COLUMNS} FROM audit_events`,
        'time',
        where,
        params,
        page,
        toAudit,
        (e) => ({ at: e.time, id: e.id }),
      )
    },
  }
}

function pageOf<R, T>(
  db: DatabaseSync,
  select: string,
  timeColumn: string,
  where: string[],
  params: SQLInputValue[],
  page: PageRequest,
  map: (row: R) => T,
  positionOf: (item: T) => { at: number; id: string },
): Page<T> {
  const limit = checkPageLimit(page.limit)
  if (page.cursor !== undefined) {
    const after = decodeCursor(page.cursor)
    where.push(`(${timeColumn}, id) < (?, ?)`)
    params.push(after.at, after.id)
  }
  const clause = where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''
  const rows = db
    .prepare(`${select} ${clause} ORDER BY ${timeColumn} DESC, id DESC LIMIT ?`)
    .all(...params, limit + 1) as unknown as R[]
  return toPage(rows.map(map), limit, positionOf)
}

function toAdminToken(row: AdminTokenRow): AdminTokenRecord {
  return {
    id: row.id,
    tokenHash: row.token_hash,
    name: row.name,
    role: row.role as AdminRole,
    last4: row.last4,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
  }
}
