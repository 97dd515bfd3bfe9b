/**
 * Operators' statements (admin tokens, cross-tenant searches, console sessions), written once
 * for both dialects (db.ts): the admin API's `AdminStore`.
 */
import type { PatRecord } from '../../core/ports.ts'
import {
  type AdminStore,
  addAuditSearch,
  addPatSearch,
  createWhere,
  searchPage,
} from '../admin-store.ts'
import * as rows from '../rows.ts'
import type { StoredAuditEvent } from '../store.ts'
import type { SqlDb } from './db.ts'

const TOKENS = rows.ADMIN_TOKEN_COLUMNS
const SESSIONS = rows.SESSION_COLUMNS

/** The `AdminStore` over a store's database. */
export function createAdminStore(db: SqlDb): AdminStore {
  const all = <R extends object>(sql: string, params?: readonly unknown[]) => db.all<R>(sql, params)
  return {
    async insertAdminToken(record) {
      await db.run(`INSERT INTO admin_tokens (${TOKENS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, [
        ...rows.adminTokenValues(record),
      ])
    },
    async findAdminTokenByHash(tokenHash) {
      const found = await all<rows.AdminTokenRow>(
        `SELECT ${TOKENS} FROM admin_tokens WHERE token_hash = $1`,
        [tokenHash],
      )
      return found[0] && rows.toAdminToken(found[0])
    },
    async listAdminTokens() {
      const found = await all<rows.AdminTokenRow>(
        `SELECT ${TOKENS} FROM admin_tokens ORDER BY created_at DESC, id DESC`,
      )
      return found.map(rows.toAdminToken)
    },
    async revokeAdminToken(id, at) {
      const found = await all<rows.AdminTokenRow>(
        `UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2
         RETURNING ${TOKENS}`,
        [at, id],
      )
      return found[0] && rows.toAdminToken(found[0])
    },
    async searchPats(search, page) {
      const where = createWhere()
      addPatSearch(where, search)
      return searchPage<rows.PatRow, PatRecord>(
        all,
        `SELECT ${rows.PAT_COLUMNS} FROM pats`,
        'created_at',
        where,
        page,
        rows.toPat,
        (p) => ({ at: p.createdAt, id: p.id }),
      )
    },
    async searchAudit(search, page) {
      const where = createWhere()
      addAuditSearch(where, search)
      return searchPage<rows.AuditRow, StoredAuditEvent>(
        all,
        `SELECT ${rows.AUDIT_COLUMNS} FROM audit_events`,
        'time',
        where,
        page,
        rows.toAudit,
        (e) => ({ at: e.time, id: e.id }),
      )
    },
    async insertSession(record, limits) {
      // The clean-up and the insert commit together.
      await db.atomic(async (tx) => {
        const ranked = (where: string) =>
          `SELECT id_hash FROM (SELECT id_hash, row_number() OVER (
             ORDER BY created_at DESC, id_hash DESC) AS r FROM console_sessions ${where}) AS ranked`
        await tx.run(
          `DELETE FROM console_sessions WHERE expires_at <= $1 OR last_seen < $2
             OR id_hash IN (${ranked('WHERE credential = $3')} WHERE r > $4)
             OR id_hash IN (${ranked('')} WHERE r > $5)`,
          [
            limits.now,
            limits.staleBefore,
            record.credential,
            limits.perCredential - 1,
            limits.total - 1,
          ],
        )
        await tx.run(
          `INSERT INTO console_sessions (${SESSIONS})
           VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9::jsonb)`,
          [...rows.sessionValues(record)],
        )
      })
    },
    async findSession(idHash) {
      const found = await all<rows.SessionRow>(
        `SELECT ${SESSIONS} FROM console_sessions WHERE id_hash = $1`,
        [idHash],
      )
      return found[0] && rows.toSession(found[0])
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
      await db.run(
        `UPDATE console_sessions SET ${sets.join(', ')} WHERE id_hash = $${params.length}`,
        params,
      )
    },
    async deleteSession(idHash) {
      await db.run('DELETE FROM console_sessions WHERE id_hash = $1', [idHash])
    },
  }
}
