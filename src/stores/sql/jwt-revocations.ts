/** JWT revocation rules' statements (core/jwt-revocations.ts), written once for both dialects (db.ts). */
import type { JwtRevocationKind, JwtRevocationRule } from '../../core/jwt-revocations.ts'
import type { SqlDb } from './db.ts'

const COLUMNS = 'id, issuer, kind, value, issued_before, reason, created_at, created_by, expires_at'

type Row = {
  id: string
  issuer: string
  kind: string
  value: string
  issued_before: number | string | null
  reason: string | null
  created_at: number | string
  created_by: string | null
  expires_at: number | string
}

function toRule(row: Row): JwtRevocationRule {
  return {
    id: row.id,
    issuer: row.issuer,
    kind: row.kind as JwtRevocationKind,
    value: row.value,
    issuedBefore: row.issued_before === null ? null : Number(row.issued_before),
    reason: row.reason,
    createdAt: Number(row.created_at),
    createdBy: row.created_by,
    expiresAt: Number(row.expires_at),
  }
}

/**
 * Stores a rule; one rule per (issuer, kind, value): revoking the same again keeps the first
 * rule's id and widens it (the later time bound and expiry, the new reason).
 */
export async function putJwtRevocation(
  db: SqlDb,
  rule: JwtRevocationRule,
): Promise<JwtRevocationRule> {
  const stored = await db.change((tx) =>
    tx.all<Row>(
      `INSERT INTO jwt_revocations (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
       ON CONFLICT (issuer, kind, value) DO UPDATE SET
         issued_before = GREATEST(jwt_revocations.issued_before, excluded.issued_before),
         reason = excluded.reason,
         created_by = excluded.created_by,
         expires_at = GREATEST(jwt_revocations.expires_at, excluded.expires_at)
       RETURNING ${COLUMNS}`,
      [
        rule.id,
        rule.issuer,
        rule.kind,
        rule.value,
        rule.issuedBefore,
        rule.reason,
        rule.createdAt,
        rule.createdBy,
        rule.expiresAt,
      ],
    ),
  )
  return toRule(stored[0] as Row)
}

export async function getJwtRevocation(
  db: SqlDb,
  id: string,
): Promise<JwtRevocationRule | undefined> {
  const found = await db.all<Row>(`SELECT ${COLUMNS} FROM jwt_revocations WHERE id = $1`, [id])
  return found[0] && toRule(found[0])
}

/** The rules still in force at `now` (not yet expired), oldest first. */
export async function listJwtRevocations(
  db: SqlDb,
  now: number,
): Promise<readonly JwtRevocationRule[]> {
  const found = await db.all<Row>(
    `SELECT ${COLUMNS} FROM jwt_revocations WHERE expires_at > $1 ORDER BY created_at, id`,
    [now],
  )
  return found.map(toRule)
}

/**
 * The rules in force at `now` and the change log's head, in ONE statement (one snapshot in
 * both dialects): every rule change logged up to `head` is in `rules`, so a follower of the
 * log from `head` on misses none (auth/jwt-revocation-feed.ts).
 */
export async function snapshotJwtRevocations(
  db: SqlDb,
  now: number,
): Promise<{ rules: readonly JwtRevocationRule[]; head: number }> {
  const found = await db.all<Row & { head: number | string }>(
    `SELECT h.head, ${COLUMNS}
     FROM (SELECT coalesce(max(seq), 0) AS head FROM change_log) AS h
     LEFT JOIN jwt_revocations ON expires_at > $1
     ORDER BY created_at, id`,
    [now],
  )
  return {
    rules: found.filter((row) => row.id !== null).map(toRule),
    head: Number(found[0]?.head ?? 0),
  }
}

export async function removeJwtRevocation(db: SqlDb, id: string): Promise<boolean> {
  return (await db.change((tx) => tx.run('DELETE FROM jwt_revocations WHERE id = $1', [id]))) > 0
}

/** Deletes at most `limit` rules expired before `before` (retention); how many. */
export function pruneJwtRevocations(db: SqlDb, before: number, limit: number): Promise<number> {
  return db.change((tx) =>
    tx.run(
      `DELETE FROM jwt_revocations WHERE id IN (
         SELECT id FROM jwt_revocations WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)`,
      [before, limit],
    ),
  )
}
