/** The audit log's and the webhook outbox's statements, written once for both dialects (db.ts). */
import { checkPageLimit, decodeCursor, toPage } from '../cursor.ts'
import * as rows from '../rows.ts'
import type {
  AppendAuditOptions,
  OutboxDestination,
  OutboxEntry,
  OutboxStats,
  Page,
  PageRequest,
  StoredAuditEvent,
} from '../store.ts'
import { listParam, type SqlDb } from './db.ts'

const COLUMNS = rows.AUDIT_COLUMNS
const TYPES = ['text', 'bigint', 'text', 'text', 'text', 'text', 'text', 'text', 'jsonb']
const AUDIT = COLUMNS.split(', ').map((name, i) => ({ name, type: TYPES[i] as string }))

/**
 * Stores a batch in one transaction. An id already stored is skipped, so a retried batch that
 * did commit is not duplicated; only the events stored now are queued, in batch order, so
 * delivered events are not queued again.
 */
export async function appendAudit(
  db: SqlDb,
  events: readonly StoredAuditEvent[],
  options?: AppendAuditOptions,
): Promise<void> {
  db.checkOpen()
  if (events.length === 0) return
  // Details as JSON values, not JSON text: the dialect stores them as it stores JSON.
  const values = events.map((e) => [
    e.id,
    e.time,
    e.type,
    e.tenantId,
    e.actor,
    e.outcome,
    e.clientAddress,
    e.requestId,
    e.details,
  ])
  // No delivery configured: store only (all or nothing, ids already stored skipped).
  if (options?.queue === false) {
    await db.insertRows('audit_events', AUDIT, values, 'ON CONFLICT (id) DO NOTHING')
    return
  }
  await db.atomic(async (tx) => {
    const stored = await tx.insertRows<{ id: string }>(
      'audit_events',
      AUDIT,
      values,
      'ON CONFLICT (id) DO NOTHING RETURNING id',
    )
    if (stored.length === 0) return
    const now = new Set(stored.map((row) => row.id))
    const fresh = events.filter((e) => now.has(e.id))
    const queued = options?.webhook === false ? [] : fresh.map((e) => [e.id, ''])
    // Each further destination (a CAEP receiver) gets its own row for the types it takes.
    for (const destination of await destinations(tx)) {
      for (const e of fresh)
        if (destination.types.has(e.type)) queued.push([e.id, destination.name])
    }
    if (queued.length > 0) await tx.insertRows('event_outbox', OUTBOX, queued, '')
  })
}

const OUTBOX = [
  { name: 'event_id', type: 'text' },
  { name: 'destination', type: 'text' },
]

async function destinations(db: SqlDb): Promise<{ name: string; types: Set<string> }[]> {
  const found = await db.all<{ name: string; event_types: string }>(
    'SELECT name, event_types FROM outbox_destinations',
  )
  return found.map((row) => ({
    name: row.name,
    types: new Set(JSON.parse(row.event_types) as string[]),
  }))
}

/**
 * Replaces the outbox's further destinations (the webhook, `''`, is always one). A
 * destination no longer listed loses its pending entries: nothing would deliver them.
 */
export function setOutboxDestinations(
  db: SqlDb,
  list: readonly OutboxDestination[],
): Promise<void> {
  return db.atomic(async (tx) => {
    const names = list.map((d) => d.name)
    await tx.run(
      `DELETE FROM event_outbox WHERE destination <> '' AND NOT (destination ${tx.dialect.inList('$1')})`,
      [listParam(names)],
    )
    await tx.run(`DELETE FROM outbox_destinations WHERE NOT (name ${tx.dialect.inList('$1')})`, [
      listParam(names),
    ])
    for (const d of list) {
      await tx.run(
        `INSERT INTO outbox_destinations (name, event_types) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET event_types = excluded.event_types`,
        [d.name, JSON.stringify([...d.eventTypes])],
      )
    }
  })
}

export async function listAudit(
  db: SqlDb,
  tenantId: string,
  page: PageRequest,
): Promise<Page<StoredAuditEvent>> {
  const limit = checkPageLimit(page.limit)
  const params: unknown[] = [tenantId]
  let after = ''
  if (page.cursor !== undefined) {
    const position = decodeCursor(page.cursor)
    params.push(position.at, position.id)
    after = 'AND (time, id) < ($2::bigint, $3::text)'
  }
  params.push(limit + 1)
  const found = await db.all<rows.AuditRow>(
    `SELECT ${COLUMNS} FROM audit_events WHERE tenant_id = $1 ${after}
     ORDER BY time DESC, id DESC LIMIT $${params.length}`,
    params,
  )
  return toPage(found.map(rows.toAudit), limit, (event) => ({ at: event.time, id: event.id }))
}

/** Oldest first, up to `limit`, never an event still waiting in the outbox. */
export function pruneAudit(db: SqlDb, before: number, limit: number): Promise<number> {
  return db.run(
    `DELETE FROM audit_events WHERE id IN (
       SELECT id FROM audit_events a WHERE time < $1 AND NOT EXISTS (
         SELECT 1 FROM event_outbox o WHERE o.event_id = a.id)
       ORDER BY time LIMIT $2)`,
    [before, limit],
  )
}

export function claimOutbox(
  db: SqlDb,
  now: number,
  limit: number,
  leaseMs: number,
  destination: string,
): Promise<readonly OutboxEntry[]> {
  return db.atomic(async (tx) => {
    // SKIP LOCKED (Postgres): instances claiming at once take different rows, never wait.
    const claimed = await tx.all<{ seq: number | string; event_id: string; attempts: number }>(
      `UPDATE event_outbox SET claimed_until = $1::bigint + $3::bigint
       WHERE seq IN (
         SELECT seq FROM event_outbox
         WHERE destination = $4 AND next_attempt_at <= $1
           AND (claimed_until IS NULL OR claimed_until <= $1)
         ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED)
       RETURNING seq, event_id, attempts`,
      [now, limit, leaseMs, destination],
    )
    if (claimed.length === 0) return []
    const events = await tx.all<rows.AuditRow>(
      `SELECT ${COLUMNS} FROM audit_events WHERE id ${tx.dialect.inList('$1')}`,
      [listParam(claimed.map((row) => row.event_id))],
    )
    const byId = new Map(events.map((row) => [row.id, rows.toAudit(row)]))
    return claimed
      .sort((a, b) => Number(a.seq) - Number(b.seq))
      .flatMap((row) => {
        const event = byId.get(row.event_id)
        return event ? [{ event, attempts: Number(row.attempts) }] : []
      })
  })
}

export async function completeOutbox(
  db: SqlDb,
  eventIds: readonly string[],
  destination: string,
): Promise<void> {
  db.checkOpen()
  if (eventIds.length === 0) return
  await db.run(
    `DELETE FROM event_outbox WHERE destination = $2 AND event_id ${db.dialect.inList('$1')}`,
    [listParam(eventIds), destination],
  )
}

export async function retryOutbox(
  db: SqlDb,
  eventIds: readonly string[],
  nextAttemptAt: number,
  error: string,
  destination: string,
): Promise<void> {
  db.checkOpen()
  if (eventIds.length === 0) return
  await db.run(
    `UPDATE event_outbox SET attempts = attempts + 1, next_attempt_at = $2,
       claimed_until = NULL, last_error = $3
     WHERE destination = $4 AND event_id ${db.dialect.inList('$1')}`,
    [listParam(eventIds), nextAttemptAt, error.slice(0, 500), destination],
  )
}

export async function outboxStats(db: SqlDb): Promise<OutboxStats> {
  const found = await db.all<{ pending: number | string; oldest: number | string | null }>(
    `SELECT count(*) AS pending, min(a.time) AS oldest
     FROM event_outbox o JOIN audit_events a ON a.id = o.event_id`,
  )
  const row = found[0] as { pending: number | string; oldest: number | string | null }
  return {
    pending: Number(row.pending),
    oldestTime: row.oldest === null ? null : Number(row.oldest),
  }
}

/** Empties the webhook's queue (`''`); the CAEP receivers' entries stay. */
export function clearOutbox(db: SqlDb): Promise<number> {
  return db.run(`DELETE FROM event_outbox WHERE destination = ''`)
}
