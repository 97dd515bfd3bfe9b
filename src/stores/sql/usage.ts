/** Quota counts' and usage counts' statements, written once for both dialects (db.ts). */
import * as rows from '../rows.ts'
import type {
  QuotaCount,
  QuotaReservation,
  UsageQuery,
  UsageResolution,
  UsageRow,
} from '../store.ts'
import { encodeUsage, isUsageBatch, type UsageBatch, type UsageRows } from '../usage-batch.ts'
import { listParam, type SqlDb } from './db.ts'

type QuotaRow = { counter: string; period_start: Num; used: Num; last_grant: Num; generation: Num }
/** A count or time: a number in SQLite, a bigint string from pg. */
type Num = number | string

/**
 * One statement under the row's lock: a later period starts the count again, the grant never
 * takes the count past the limit, and last_grant says what this call got (SET reads the old
 * row; RETURNING sees only the new one).
 */
export async function reserveQuota(
  db: SqlDb,
  counter: string,
  periodStart: number,
  limit: number,
  want: number,
): Promise<QuotaReservation> {
  const found = await db.all<QuotaRow>(
    `INSERT INTO quota_usage AS q (counter, period_start, used, last_grant)
     VALUES ($1, $2, LEAST($4::bigint, $3::bigint), LEAST($4::bigint, $3::bigint))
     ON CONFLICT (counter) DO UPDATE SET
       last_grant = CASE WHEN q.period_start < excluded.period_start
         THEN excluded.used ELSE GREATEST(0, LEAST($4::bigint, $3::bigint - q.used)) END,
       used = CASE WHEN q.period_start < excluded.period_start
         THEN excluded.used ELSE q.used + GREATEST(0, LEAST($4::bigint, $3::bigint - q.used)) END,
       period_start = GREATEST(q.period_start, excluded.period_start)
     RETURNING last_grant, used, period_start, generation`,
    [counter, periodStart, limit, want],
  )
  const row = found[0] as QuotaRow
  return {
    granted: Number(row.last_grant),
    used: Number(row.used),
    periodStart: Number(row.period_start),
    generation: Number(row.generation),
  }
}

/** Gives back unspent uses of that period and generation only (a reset's count is new). */
export async function releaseQuota(
  db: SqlDb,
  counter: string,
  periodStart: number,
  generation: number,
  count: number,
): Promise<void> {
  await db.run(
    `UPDATE quota_usage SET used = GREATEST(0, used - $4)
     WHERE counter = $1 AND period_start = $2 AND generation = $3`,
    [counter, periodStart, generation, count],
  )
}

export async function readQuota(
  db: SqlDb,
  counters: readonly string[],
): Promise<ReadonlyMap<string, QuotaCount>> {
  db.checkOpen()
  if (counters.length === 0) return new Map()
  const found = await db.all<QuotaRow>(
    `SELECT counter, period_start, used FROM quota_usage WHERE counter ${db.dialect.inList('$1')}`,
    [listParam(counters)],
  )
  return new Map(
    found.map((r) => [r.counter, { periodStart: Number(r.period_start), used: Number(r.used) }]),
  )
}

/** The count starts again in a new generation: releases of older reservations miss it. */
export async function resetQuota(db: SqlDb, counter: string): Promise<void> {
  await db.run(
    `UPDATE quota_usage SET used = 0, last_grant = 0, generation = generation + 1
     WHERE counter = $1`,
    [counter],
  )
}

const USAGE_TYPES = [
  'text',
  'text',
  'text',
  'bigint',
  'text',
  'bigint',
  'bigint',
  'bigint',
  'bigint',
]

/**
 * Adds each row's counts to its bucket, in one statement (rows name distinct buckets). With a
 * `mark`, once: the mark is recorded in the same transaction, and a mark already recorded
 * skips the rows (a replayed usage journal slice, stores/usage-journal.ts).
 */
export async function addUsage(db: SqlDb, usage: UsageRows, mark?: string): Promise<void> {
  db.checkOpen()
  const batch = isUsageBatch(usage) ? usage : encodeUsage(usage)
  if (batch.rows === 0) return
  if (mark === undefined) return insertUsage(db, batch)
  await db.atomic(async (tx) => {
    const fresh = await tx.all(
      `INSERT INTO usage_applied (mark, applied_at) VALUES ($1, $2)
       ON CONFLICT (mark) DO NOTHING RETURNING mark`,
      [mark, Date.now()],
    )
    if (fresh.length > 0) await insertUsage(tx, batch)
  })
}

async function insertUsage(db: SqlDb, usage: UsageBatch): Promise<void> {
  await db.run(
    `INSERT INTO usage_counts (${rows.USAGE_COLUMNS})
     SELECT ${USAGE_TYPES.map((_t, i) => `b.c${i}`).join(', ')}
     FROM ${db.dialect.batch('$1', USAGE_TYPES)} WHERE true
     ON CONFLICT (scope, subject, resolution, bucket_start) DO UPDATE SET
       allowed = usage_counts.allowed + excluded.allowed,
       unauthorized = usage_counts.unauthorized + excluded.unauthorized,
       forbidden = usage_counts.forbidden + excluded.forbidden,
       limited = usage_counts.limited + excluded.limited`,
    [usage.text],
  )
}

export async function readUsage(db: SqlDb, query: UsageQuery): Promise<readonly UsageRow[]> {
  const found = await db.all<rows.UsageCountRow>(
    `SELECT ${rows.USAGE_COLUMNS} FROM usage_counts
     WHERE scope = $1 AND subject = $2 AND resolution = $3
       AND bucket_start >= $4 AND bucket_start < $5
     ORDER BY bucket_start`,
    [query.scope, query.subject, query.resolution, query.since, query.until],
  )
  return found.map(rows.toUsage)
}

export async function topKeys(
  db: SqlDb,
  tenantId: string,
  resolution: UsageResolution,
  since: number,
  until: number,
  limit: number,
) {
  const found = await db.all<rows.UsageCountRow>(
    `SELECT subject, tenant_id, sum(allowed) AS allowed, sum(unauthorized) AS unauthorized,
       sum(forbidden) AS forbidden, sum(limited) AS limited
     FROM usage_counts
     WHERE scope = 'key' AND tenant_id = $1 AND resolution = $2
       AND bucket_start >= $3 AND bucket_start < $4
     GROUP BY subject, tenant_id
     ORDER BY sum(allowed) + sum(unauthorized) + sum(forbidden) + sum(limited) DESC, subject
     LIMIT $5`,
    [tenantId, resolution, since, until, limit],
  )
  return found.map(rows.toKeyUsage)
}

/** Deletes up to `limit` buckets of `resolution` that start before `before`; how many. */
export async function pruneUsage(
  db: SqlDb,
  resolution: UsageResolution,
  before: number,
  limit: number,
): Promise<number> {
  const buckets = await db.run(
    `DELETE FROM usage_counts WHERE (scope, subject, resolution, bucket_start) IN (
       SELECT scope, subject, resolution, bucket_start FROM usage_counts
       WHERE resolution = $1 AND bucket_start < $2 LIMIT $3)`,
    [resolution, before, limit],
  )
  // Applied marks are kept as long as minute buckets (a journal replayed later than that
  // would find its minutes gone anyway); a few per flush, so one unbatched delete.
  if (resolution === 'minute') {
    await db.run('DELETE FROM usage_applied WHERE applied_at < $1', [before])
  }
  return buckets
}
