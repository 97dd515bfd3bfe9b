import type { PatRecord } from '../core/ports.ts'
import {
  type AdminStore,
  addAuditSearch,
  addPatSearch,
  createWhere,
  searchPage,
} from './admin-store.ts'
import {
  ADMIN_TOKEN_COLUMNS,
  type AdminTokenRow,
  type AuditRow,
  adminTokenValues,
  type PatRow,
  SESSION_COLUMNS,
  type SessionRow,
  sessionValues,
  toAdminToken,
  toAudit,
  toPat,
  toSession,
} from './rows.ts'
import type { StoredAuditEvent } from './store.ts'

/** The store's query function: rows, with unique violations already as ConflictError. */
type Query = <R extends object>(sql: string, params?: unknown[]) => Promise<R[]>

const numbered = (n: number) => `$${n}`

/** The Postgres `AdminStore`, over the store's pool. */
export function createPostgresAdminStore(query: Query): AdminStore {
  return {
    async insertAdminToken(r) {
      await query(
        `INSERT INTO admin_tokens (${ADMIN_TOKEN_COLUMNS})
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
        [...adminTokenValues(r)],
      )
    },
    async findAdminTokenByHash(tokenHash) {
      const rows = await query<AdminTokenRow>('SELECT * FROM admin_tokens WHERE token_hash = $1', [
        tokenHash,
      ])
      return rows[0] && toAdminToken(rows[0])
    },
    async listAdminTokens() {
      const rows = await query<AdminTokenRow>(
        'SELECT * FROM admin_tokens ORDER BY created_at DESC, id DESC',
      )
      return rows.map(toAdminToken)
    },
    async revokeAdminToken(id, at) {
      const rows = await query<AdminTokenRow>(
        `UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2
          RETURNING *`,
        [at, id],
      )
      return rows[0] && toAdminToken(rows[0])
    },
    async searchPats(search, page) {
      const where = createWhere(numbered)
      addPatSearch(where, search, 'ILIKE')
      return searchPage<PatRow, PatRecord>(
        query,
        'SELECT * FROM pats',
        'created_at',
        where,
        page,
        toPat,
        (p) => ({ at: p.createdAt, id: p.id }),
      )
    },
    async searchAudit(search, page) {
      const where = createWhere(numbered)
      addAuditSearch(where, search)
      return searchPage<AuditRow, StoredAuditEvent>(
        query,
        'SELECT * FROM audit_events',
        'time',
        where,
        page,
        toAudit,
        (e) => ({ at: e.time, id: e.id }),
      )
    },
    async insertSession(record, limits) {
      // One statement: the clean-up and the insert commit together.
      await query(
        `WITH gone AS (
           DELETE FROM console_sessions WHERE expires_at <= $10 OR last_seen < $11
             OR id_hash IN (SELECT id_hash FROM console_sessions WHERE credential = $2
               ORDER BY created_at DESC, id_hash DESC OFFSET $12)
             OR id_hash IN (SELECT id_hash FROM console_sessions
               ORDER BY created_at DESC, id_hash DESC OFFSET $13))
         INSERT INTO console_sessions (${SESSION_COLUMNS})
         VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9::jsonb)`,
        [
          ...sessionValues(record),
          limits.now,
          limits.staleBefore,
          limits.perCredential - 1,
          limits.total - 1,
        ],
      )
    },
    async findSession(idHash) {
      const rows = await query<SessionRow>('SELECT * FROM console_sessions WHERE id_hash = $1', [
        idHash,
      ])
      return rows[0] && toSession(rows[0])
    },
    async updateSession(idHash, changes) {
      const sets: string[] = []
      const params: unknown[] = []
      for (const [column, value, cast] of [
        ['last_seen', changes.lastSeen, ''],
        ['flash', changes.flash, ''],
        ['notice', changes.notice, '::jsonb'],
      ] as const) {
        if (value === undefined) continue
        params.push(value)
        sets.push(`${column} = $${params.length}${cast}`)
      }
      if (sets.length === 0) return
      params.push(idHash)
      await query(
        `UPDATE console_sessions SET ${sets.join(', ')} WHERE id_hash = $${params.length}`,
        params,
      )
    },
    async deleteSession(idHash) {
      await query('DELETE FROM console_sessions WHERE id_hash = $1', [idHash])
    },
  }
}
