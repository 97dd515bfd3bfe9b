/** The SETs received from CAEP/SSF transmitters, for replay checks (ssf/receiver.ts), written once for both dialects. */
import type { SqlDb } from './db.ts'

/**
 * Records that `transmitter`'s SET `jti` was received; true when it is new, false when any
 * instance recorded it before (a replay). One statement: the primary key decides, so two
 * instances receiving the same SET at once cannot both see it as new.
 */
export function recordSsfReceived(
  db: SqlDb,
  transmitter: string,
  jti: string,
  receivedAt: number,
  expiresAt: number,
): Promise<boolean> {
  return db
    .change((tx) =>
      tx.run(
        `INSERT INTO ssf_received (transmitter, jti, received_at, expires_at)
         VALUES ($1, $2, $3, $4) ON CONFLICT (transmitter, jti) DO NOTHING`,
        [transmitter, jti, receivedAt, expiresAt],
      ),
    )
    .then((inserted) => inserted === 1)
}

/**
 * Forgets a record made by `recordSsfReceived` whose SET could not be applied, so that the
 * transmitter's next delivery of it is applied instead of refused as a replay.
 */
export function forgetSsfReceived(db: SqlDb, transmitter: string, jti: string): Promise<number> {
  return db.change((tx) =>
    tx.run('DELETE FROM ssf_received WHERE transmitter = $1 AND jti = $2', [transmitter, jti]),
  )
}

/** Deletes at most `limit` records that expired at or before `before`; how many. */
export function pruneSsfReceived(db: SqlDb, before: number, limit: number): Promise<number> {
  return db.change((tx) =>
    tx.run(
      `DELETE FROM ssf_received WHERE (transmitter, jti) IN (
         SELECT transmitter, jti FROM ssf_received WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)`,
      [before, limit],
    ),
  )
}
