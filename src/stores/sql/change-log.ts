/** Reading and pruning the change log (../change-log.ts follows it), once for both dialects. */
import type { LogEntry } from '../change-log.ts'
import type { SqlDb } from './db.ts'

type Row = {
  seq: number | string
  kind: string
  subject: string
  at: number | string
  lowest: number | string | null
}

/**
 * The entries after `seq` (at most `limit`) and the lowest number kept, in one round trip.
 * With no entry after `seq` no row comes back and `lowest` is null: the follower only needs
 * it to spot entries pruned between `seq` and the first one returned, and an idle poll is
 * then a single primary-key probe (no scan of the log for its minimum, no outer sort).
 */
export async function readChangesAfter(
  db: SqlDb,
  seq: number,
  limit: number,
): Promise<{ entries: LogEntry[]; lowest: number | null }> {
  const found = await db.all<Row>(
    `SELECT seq, kind, subject, at, (SELECT min(seq) FROM change_log) AS lowest
     FROM change_log WHERE seq > $1 ORDER BY seq LIMIT $2`,
    [seq, limit],
  )
  const lowest = found[0]?.lowest ?? null
  return {
    entries: found.map((row) => ({
      seq: Number(row.seq),
      kind: row.kind,
      subject: row.subject,
      at: Number(row.at),
    })),
    lowest: lowest === null ? null : Number(lowest),
  }
}

/**
 * Deletes the entries older than `before`, but never the newest: a follower whose cursor is
 * behind it then finds `lowest` past its cursor and resyncs; an emptied log would tell it
 * nothing. How many.
 */
export function pruneChanges(db: SqlDb, before: number): Promise<number> {
  return db.run(
    'DELETE FROM change_log WHERE at < $1 AND seq < (SELECT max(seq) FROM change_log)',
    [before],
  )
}
