/** PATs' statements, written once for both dialects (db.ts). */
import type { PatRecord } from '../../core/ports.ts'
import { checkPageLimit, decodeCursor, toPage } from '../cursor.ts'
import * as rows from '../rows.ts'
import {
  type Changed,
  checkReplacement,
  type Page,
  type PageRequest,
  type PatChanges,
} from '../store.ts'
import { batchParam, type Dialect, placeholders, type SqlDb } from './db.ts'

const COLUMNS = rows.PAT_COLUMNS

/** The type of each PAT column, in PAT_COLUMNS order (Postgres casts its parameters). */
const TYPES = [
  'text',
  'text',
  'text',
  'text',
  'text',
  'text[]',
  'text',
  'bigint',
  'bigint',
  'bigint',
  'bigint',
  'text',
  'bigint',
  'bigint',
  'bigint',
  'jsonb',
  'jsonb',
  'jsonb',
  'text',
  'text',
] as const
const EDIT_TYPES = ['text', 'text[]', 'bigint', 'bigint', 'jsonb', 'jsonb', 'jsonb', 'text', 'text']
const INSERT = `INSERT INTO pats (${COLUMNS}) VALUES (${placeholders(1, TYPES)})`
const UPDATE = `UPDATE pats SET ${rows.PAT_EDIT_COLUMNS.map(
  (column, i) => `${column} = $${i + 2}::${EDIT_TYPES[i]}`,
).join(', ')} WHERE id = $1`

const values = (dialect: Dialect, record: PatRecord) => [
  ...rows.patValues(record, (list) => dialect.textArray(list)),
]
const one = (found: rows.PatRow[]) => found[0] && rows.toPat(found[0])

export async function insertPat(db: SqlDb, record: PatRecord): Promise<void> {
  await db.run(INSERT, values(db.dialect, record))
}

/** Many tokens in one transaction (all or none): imports, seeding, benchmarks. */
export function insertPats(db: SqlDb, records: readonly PatRecord[]): Promise<void> {
  return db.atomic(async (tx) => {
    for (const record of records) await tx.run(INSERT, values(db.dialect, record))
  })
}

export async function getPat(db: SqlDb, id: string): Promise<PatRecord | undefined> {
  return one(await db.all<rows.PatRow>(`SELECT ${COLUMNS} FROM pats WHERE id = $1`, [id]))
}

export async function findPatByHash(db: SqlDb, hash: string): Promise<PatRecord | undefined> {
  return one(await db.all<rows.PatRow>(`SELECT ${COLUMNS} FROM pats WHERE token_hash = $1`, [hash]))
}

export async function listPats(
  db: SqlDb,
  tenantId: string,
  page: PageRequest,
  filter: { expiringBefore?: number } = {},
): Promise<Page<PatRecord>> {
  const limit = checkPageLimit(page.limit)
  const params: unknown[] = [tenantId]
  const where = ['tenant_id = $1']
  if (page.cursor !== undefined) {
    const after = decodeCursor(page.cursor)
    params.push(after.at, after.id)
    where.push(`(created_at, id) < ($${params.length - 1}::bigint, $${params.length}::text)`)
  }
  if (filter.expiringBefore !== undefined) {
    params.push(filter.expiringBefore)
    where.push(`revoked_at IS NULL AND expires_at < $${params.length}::bigint`)
  }
  params.push(limit + 1)
  const found = await db.all<rows.PatRow>(
    `SELECT ${COLUMNS} FROM pats WHERE ${where.join(' AND ')}
     ORDER BY created_at DESC, id DESC LIMIT $${params.length}`,
    params,
  )
  return toPage(found.map(rows.toPat), limit, (pat) => ({ at: pat.createdAt, id: pat.id }))
}

export async function revokePat(db: SqlDb, id: string, at: number) {
  // COALESCE keeps the first revocation time: revoking twice changes nothing.
  return one(
    await db.change((tx) =>
      tx.all<rows.PatRow>(
        `UPDATE pats SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING ${COLUMNS}`,
        [id, at],
      ),
    ),
  )
}

/**
 * Last-used times as `recordPatUse`'s statement reads them (`batchParam`'s JSON text), and how
 * many: what the SQLite writer thread is sent instead of the Map (sqlite-writer.ts), so that
 * the thread rebuilds no 100,000-entry Map and its arrays before making this same text.
 */
export interface EncodedPatUses {
  readonly uses: number
  readonly text: string
}

export const encodePatUses = (uses: ReadonlyMap<string, number>): EncodedPatUses => ({
  uses: uses.size,
  text: batchParam([...uses]),
})

/** Last-used times, one statement per batch; forward only, so a late batch moves nothing back. */
export async function recordPatUse(
  db: SqlDb,
  uses: ReadonlyMap<string, number> | EncodedPatUses,
): Promise<void> {
  db.checkOpen()
  const batch = uses instanceof Map ? encodePatUses(uses) : (uses as EncodedPatUses)
  if (batch.uses === 0) return
  await db.run(
    `UPDATE pats SET last_used_at = b.c1 FROM ${db.dialect.batch('$1', ['text', 'bigint'])}
     WHERE pats.id = b.c0 AND (pats.last_used_at IS NULL OR pats.last_used_at < b.c1)`,
    [batch.text],
  )
}

export function updatePat(
  db: SqlDb,
  id: string,
  changes: PatChanges,
): Promise<Changed<PatRecord> | undefined> {
  return db.change(async (tx) => {
    const found = await tx.all<rows.PatRow>(
      `SELECT ${COLUMNS} FROM pats WHERE id = $1 AND revoked_at IS NULL FOR UPDATE`,
      [id],
    )
    if (!found[0]) return undefined
    const before = rows.toPat(found[0])
    const after = rows.changedPat(before, changes)
    await tx.run(UPDATE, [id, ...rows.patEditValues(after, (list) => db.dialect.textArray(list))])
    return { before, after }
  })
}

export async function rotatePat(
  db: SqlDb,
  oldId: string,
  replacement: PatRecord,
  at: number,
  graceUntil: number,
): Promise<PatRecord | undefined> {
  checkReplacement(oldId, replacement, at, graceUntil)
  return db.change(async (tx) => {
    // Only a current token is rotated: a revoked or already replaced one matches no row.
    const old = one(
      await tx.all<rows.PatRow>(
        `UPDATE pats SET superseded_at = $2, grace_until = $3
         WHERE id = $1 AND revoked_at IS NULL AND superseded_at IS NULL RETURNING ${COLUMNS}`,
        [oldId, at, graceUntil],
      ),
    )
    if (old) await tx.run(INSERT, values(db.dialect, replacement))
    return old
  })
}

export async function revokePatFamily(db: SqlDb, id: string, at: number) {
  // Row locks (Postgres) or the write lock (SQLite): each row is revoked by one caller.
  const revoked = await db.change((tx) =>
    tx.all<rows.PatRow>(
      `WITH RECURSIVE ${rows.rotationFamily('$1')}
       UPDATE pats SET revoked_at = $2
       WHERE id IN (SELECT id FROM down) AND revoked_at IS NULL RETURNING ${COLUMNS}`,
      [id, at],
    ),
  )
  return revoked.map(rows.toPat)
}

export async function listPatFamily(db: SqlDb, id: string): Promise<readonly PatRecord[]> {
  const found = await db.all<rows.PatRow>(
    `WITH RECURSIVE ${rows.rotationFamily('$1')}
     SELECT ${COLUMNS} FROM pats WHERE id IN (SELECT id FROM down) ORDER BY created_at, id`,
    [id],
  )
  return found.map(rows.toPat)
}
