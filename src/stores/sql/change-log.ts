/** Reading and pruning the change log (../change-log.ts follows it), once for both dialects. */
import type { LogEntry } from '../change-log.ts'
import type { SqlDb } from './db.ts'

type Row = {
  seq: number | string | null
  kind: string
  subject: string
  at: number | string
  lowest: number | string | null
}

/**
 * The entries after `seq` (at most `limit`) and the lowest number kept, in one round trip:
 * with no entry after `seq`, one row of nulls carries `lowest`.
 */
export async function readChangesAfter(
  db: SqlDb,
  seq: number,
  limit: number,
): Promise<{ entries: LogEntry[]; lowest: number | null }> {
  const found = await db.all<Row>(
    `SELECT l.seq, l.kind, l.subject, l.at, (SELECT min(seq) FROM change_log) AS lowest
     FROM (SELECT 1 AS one) AS o LEFT JOIN (
       SELECT seq, kind, subject, at FROM change_log WHERE seq > $1 ORDER BY seq LIMIT $2
     ) AS l ON true
     ORDER BY l.seq`,
    [seq, limit],
  )
  const lowest = found[0]?.lowest ?? null
  return {
    entries: found
      .filter((row) => row.seq !== null)
      .map((row) => ({
        seq: Number(row.seq),
        kind: row.kind,
        subject: row.subject,
        at: Number(row.at),
      })),
    lowest: lowest === null ? null : Number(lowest),
  }
}

/** Deletes the entries older than `before`; how many. */
export function pruneChanges(db: SqlDb, before: number): Promise<number> {
  return db.run('DELETE FROM change_log WHERE at < $1', [before])
}
