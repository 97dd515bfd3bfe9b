import type { DatabaseSync, SQLInputValue } from 'node:sqlite'
import type { PatRecord } from '../core/ports.ts'
import {
  type AdminStore,
  type AuditSearch,
  addAuditSearch,
  addPatSearch,
  createWhere,
  searchPage,
} from './admin-store.ts'
import {
  ADMIN_TOKEN_COLUMNS,
  type AdminTokenRow,
  AUDIT_COLUMNS,
  type AuditRow,
  adminTokenValues,
  PAT_COLUMNS,
  type PatRow,
  SESSION_COLUMNS,
  type SessionRow,
  sessionValues,
  toAdminToken,
  toAudit,
  toPat,
  toSession,
} from './rows.ts'
import { ConflictError, type StoredAuditEvent } from './store.ts'

const SQLITE_CONSTRAINT_PRIMARYKEY = 1555
const SQLITE_CONSTRAINT_UNIQUE = 2067
const unnumbered = () => '?'

/**
 * The SQLite `AdminStore`, over the store's connection (`db()` throws once it is closed).
 * Statements are prepared per call: operator actions are rare, and preparing after the
 * store migrated keeps this file independent of the store's statement cache.
 */
export function createSqliteAdminStore(db: () => DatabaseSync): AdminStore {
  const all = <R>(sql: string, params: unknown[]) =>
    db()
      .prepare(sql)
      .all(...(params as SQLInputValue[])) as unknown as R[]
  return {
    async insertAdminToken(record) {
      try {
        db()
          .prepare(`INSERT INTO admin_tokens (${ADMIN_TOKEN_COLUMNS})
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
          .run(...adminTokenValues(record))
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
      const where = createWhere(unnumbered)
      addPatSearch(where, search, 'LIKE')
      return searchPage<PatRow, PatRecord>(
        all,
        `SELECT ${PAT_COLUMNS} FROM pats`,
        'created_at',
        where,
        page,
        toPat,
        (p) => ({ at: p.createdAt, id: p.id }),
      )
    },
    async searchAudit(search: AuditSearch, page) {
      const where = createWhere(unnumbered)
      addAuditSearch(where, search)
      return searchPage<AuditRow, StoredAuditEvent>(
        all,
        `SELECT ${AUDIT_COLUMNS} FROM audit_events`,
        'time',
        where,
        page,
        toAudit,
        (e) => ({ at: e.time, id: e.id }),
      )
    },
    async insertSession(record, limits) {
      const database = db()
      database
        .prepare(`DELETE FROM console_sessions WHERE expires_at <= ? OR last_seen < ?
          OR id_hash IN (SELECT id_hash FROM console_sessions WHERE credential = ?
            ORDER BY created_at DESC, id_hash DESC LIMIT -1 OFFSET ?)
          OR id_hash IN (SELECT id_hash FROM console_sessions
            ORDER BY created_at DESC, id_hash DESC LIMIT -1 OFFSET ?)`)
        .run(
          limits.now,
          limits.staleBefore,
          record.credential,
          limits.perCredential - 1,
          limits.total - 1,
        )
      database
        .prepare(
          `INSERT INTO console_sessions (${SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        )
        .run(...sessionValues(record))
    },
    async findSession(idHash) {
      const row = db().prepare('SELECT * FROM console_sessions WHERE id_hash = ?').get(idHash)
      return row && toSession(row as unknown as SessionRow)
    },
    async updateSession(idHash, changes) {
      const sets: string[] = []
      const params: SQLInputValue[] = []
      for (const [column, value] of [
        ['last_seen', changes.lastSeen],
        ['flash', changes.flash],
        ['notice', changes.notice],
      ] as const) {
        if (value === undefined) continue
        sets.push(`${column} = ?`)
        params.push(value)
      }
      if (sets.length === 0) return
      db()
        .prepare(`UPDATE console_sessions SET ${sets.join(', ')} WHERE id_hash = ?`)
        .run(...params, idHash)
    },
    async deleteSession(idHash) {
      db().prepare('DELETE FROM console_sessions WHERE id_hash = ?').run(idHash)
    },
  }
}
