/**
 * The Postgres store, for running many stateless instances on one database. Only this
 * file and `postgres-notify.ts` import `pg`; `open-store.ts` loads it on demand.
 *
 * Queries go through a `pg.Pool` as plain parameterized statements. A mutation that other
 * instances cache (revoke, tenant enable/disable, issuer put/remove) carries its
 * `pg_notify` in the same statement, so the notification is sent exactly when, and only if,
 * the change commits; each instance's `ChangeFeed` turns notifications into `watch` events.
 *
 * @example
 *   const store = await openPostgresStore('postgres://tokengate@db/tokengate')
 *   await store.migrate()
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import type { IssuerConfig } from '../core/issuer.ts'
import { type Clock, type PatRecord, systemClock, type Tenant } from '../core/ports.ts'
import type { AdminStore } from './admin-store.ts'
import { checkPageLimit, decodeCursor, toPage } from './cursor.ts'
import { createPostgresAdminStore } from './postgres-admin.ts'
import { postgresMigrations } from './postgres-migrations.ts'
import {
  CHANGES_CHANNEL,
  type ChangeFeed,
  startChangeFeed,
  type WarnLogger,
} from './postgres-notify.ts'
import * as shared from './rows.ts'

export type { ChangeFeedStatus } from './store.ts'

import {
  type AppendAuditOptions,
  type ChangeFeedStatus,
  checkReplacement,
  type OutboxEntry,
  type OutboxStats,
  type Page,
  type PageRequest,
  type Store,
  type StoreChange,
  type StoredAuditEvent,
  type StoredIssuer,
} from './store.ts'

export interface PostgresStoreOptions {
  /** Maximum pooled connections per instance (the listener uses one more). Default 10. */
  readonly poolSize?: number | undefined
  /** Used for migration timestamps. Default: the system clock. */
  readonly clock?: Clock | undefined
  readonly logger?: WarnLogger | undefined
  /**
   * Listen for changes made by other instances. Default true; a one-shot CLI command that
   * never calls `watch` can pass false to save the connection.
   */
  readonly listen?: boolean | undefined
  /** Change feed tuning (heartbeat, timeouts, backoff); see `ChangeFeedOptions`. */
  readonly changeFeed?:
    | {
        readonly heartbeatMs?: number
        readonly timeoutMs?: number
        readonly reconnectInitialMs?: number
        readonly reconnectMaxMs?: number
      }
    | undefined
}

export interface PostgresStore extends Store {
  readonly kind: 'postgres'
  readonly changeFeed: ChangeFeedStatus
}

/**
 * Opens a pool on `url` and subscribes to changes from other instances. Rejects when the
 * database cannot be reached. Call `migrate()` before use.
 */
export async function openPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<PostgresStore> {
  const store = new PgStore(url, options)
  try {
    await store.start(url, options)
  } catch (error) {
    await store.close()
    throw error
  }
  return store
}

// Any constant works: it only has to be the same for every instance. ASCII "tokeng".
const MIGRATION_LOCK_KEY = 0x746f6b656e67

/** Inserts a batch of audit events given as nine parallel arrays ($1..$9), in column order. */
const INSERT_AUDIT = `INSERT INTO audit_events (${shared.AUDIT_COLUMNS})
  SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[],
    $6::text[], $7::text[], $8::text[], $9::jsonb[])`

const UNIQUE_VIOLATION = '23505'
const FOREIGN_KEY_VIOLATION = '23503'

const notFeedConnected: ChangeFeedStatus = { connected: false, backendPid: undefined }

class PgStore implements PostgresStore {
  readonly kind = 'postgres' as const
  readonly #pool: pg.Pool
  readonly #clock: Clock
  readonly #logger: WarnLogger | undefined
  readonly #listeners = new Set<(change: StoreChange) => void>()
  // Tags our notifications: our own changes are delivered in-process, synchronously,
  // before the mutating call resolves, so their echo through NOTIFY is skipped.
  readonly #origin = randomUUID()
  #feed: ChangeFeed | undefined
  #closed = false
  /** Admin tokens and operator searches (postgres-admin.ts). */
  readonly admin: AdminStore = createPostgresAdminStore((sql, params) => this.#query(sql, params))

  constructor(url: string, options: PostgresStoreOptions) {
    this.#clock = options.clock ?? systemClock
    this.#logger = options.logger
    this.#pool = new pg.Pool({
      connectionString: url,
      max: options.poolSize ?? 10,
      connectionTimeoutMillis: 5000,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      application_name: 'tokengate',
    })
    // An idle pooled connection that breaks (server restart) is discarded by the pool; the
    // event must be handled or it would crash the process. The next query reconnects.
    this.#pool.on('error', (error) => {
      this.#logger?.warn({ err: error }, 'idle postgres connection lost')
    })
  }

  async start(url: string, options: PostgresStoreOptions): Promise<void> {
    if (options.listen === false) {
      await this.ping()
      return
    }
    this.#feed = await startChangeFeed({
      ...options.changeFeed,
      connectionString: url,
      logger: this.#logger,
      onChange: (change, origin) => {
        if (origin !== this.#origin) this.#emit(change)
      },
    })
  }

  get changeFeed(): ChangeFeedStatus {
    const feed = this.#feed
    if (!feed) return notFeedConnected
    return { connected: feed.connected, backendPid: feed.backendPid }
  }

  async migrate(): Promise<number[]> {
    this.#checkOpen()
    const client = await this.#pool.connect()
    let failure: Error | undefined
    try {
      // One transaction under a transaction-scoped advisory lock: N instances starting at
      // once queue here; the first applies, the rest then see nothing pending. Postgres DDL
      // is transactional, so a failed migration leaves neither tables nor a version row,
      // and the lock is released even if this connection dies.
      await client.query('BEGIN')
      await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY])
      await client.query(
        'CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)',
      )
      const { rows } = await client.query<{ version: number }>(
        'SELECT version FROM schema_migrations',
      )
      const applied: number[] = []
      for (const migration of shared.pendingMigrations(
        postgresMigrations,
        rows.map((row) => row.version),
      )) {
        await client.query(migration.sql)
        await client.query('INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)', [
          migration.version,
          this.#clock.now(),
        ])
        applied.push(migration.version)
      }
      await client.query('COMMIT')
      return applied
    } catch (error) {
      failure = error instanceof Error ? error : new Error(String(error))
      await client.query('ROLLBACK').catch(() => {})
      throw translate(error)
    } finally {
      // A client that failed mid-transaction is destroyed rather than reused.
      client.release(failure)
    }
  }

  async ping(): Promise<void> {
    await this.#query('SELECT 1')
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#listeners.clear()
    await this.#feed?.close()
    await this.#pool.end()
  }

  async createTenant(tenant: { id: string; name: string }, at: number): Promise<Tenant> {
    const rows = await this.#query<shared.TenantRow>(
      `INSERT INTO tenants (${shared.TENANT_COLUMNS}) VALUES ($1, $2, true, $3) RETURNING ${shared.TENANT_COLUMNS}`,
      [tenant.id, tenant.name, at],
    )
    return shared.toTenant(rows[0] as shared.TenantRow)
  }

  async listTenants(): Promise<readonly Tenant[]> {
    const rows = await this.#query<shared.TenantRow>(
      `SELECT ${shared.TENANT_COLUMNS} FROM tenants ORDER BY id`,
    )
    return rows.map(shared.toTenant)
  }

  async findTenant(id: string): Promise<Tenant | undefined> {
    const rows = await this.#query<shared.TenantRow>(
      `SELECT ${shared.TENANT_COLUMNS} FROM tenants WHERE id = $1`,
      [id],
    )
    return rows[0] && shared.toTenant(rows[0])
  }

  async setTenantEnabled(id: string, enabled: boolean): Promise<Tenant | undefined> {
    const rows = await this.#query<shared.TenantRow>(
      `WITH changed AS (UPDATE tenants SET enabled = $2 WHERE id = $1 RETURNING *)
       SELECT changed.*, pg_notify($3, json_build_object(
         'kind', 'tenant_changed', 'id', changed.id, 'origin', $4::text)::text)
       FROM changed`,
      [id, enabled, CHANGES_CHANNEL, this.#origin],
    )
    if (!rows[0]) return undefined
    const tenant = shared.toTenant(rows[0])
    this.#emit({ kind: 'tenant_changed', id: tenant.id })
    return tenant
  }

  async insertPat(record: PatRecord): Promise<void> {
    await this.#query(
      `INSERT INTO pats (${shared.PAT_COLUMNS})
       VALUES ($1, $2, $3, $4, $5, $6::text[], $7, $8, $9, $10, $11, $12, $13, $14)`,
      pgPatValues(record),
    )
  }

  async rotatePat(
    oldId: string,
    replacement: PatRecord,
    at: number,
    graceUntil: number,
  ): Promise<PatRecord | undefined> {
    checkReplacement(oldId, replacement, at, graceUntil)
    // One statement, so atomic: the replacement is inserted only if the old token was still
    // current (not revoked, not already rotated), and the notify goes out only on commit.
    const rows = await this.#query<shared.PatRow>(
      `WITH old AS (
         UPDATE pats SET superseded_at = $15, grace_until = $16
         WHERE id = $17 AND revoked_at IS NULL AND superseded_at IS NULL RETURNING *),
       inserted AS (
         INSERT INTO pats (${shared.PAT_COLUMNS})
         SELECT $1, $2, $3, $4, $5, $6::text[], $7, $8::bigint, $9::bigint, $10::bigint,
           $11::bigint, $12, $13::bigint, $14::bigint
         FROM old RETURNING id)
       SELECT old.*, pg_notify($18, json_build_object(
         'kind', 'pat_changed', 'id', old.id, 'tokenHash', old.token_hash,
         'origin', $19::text)::text)
       FROM old`,
      [...pgPatValues(replacement), at, graceUntil, oldId, CHANGES_CHANNEL, this.#origin],
    )
    if (!rows[0]) return undefined
    const pat = shared.toPat(rows[0])
    this.#emit({ kind: 'pat_changed', id: pat.id, tokenHash: pat.tokenHash })
    return pat
  }

  async revokePatFamily(id: string, at: number): Promise<readonly PatRecord[]> {
    // Row locks make concurrent callers disagree on nothing: each row is revoked by one.
    const rows = await this.#query<shared.PatRow>(
      `WITH RECURSIVE ${shared.rotationFamily('$1')},
         changed AS (
           UPDATE pats SET revoked_at = $2
           WHERE id IN (SELECT id FROM down) AND revoked_at IS NULL RETURNING *)
       SELECT changed.*, pg_notify($3, json_build_object(
         'kind', 'pat_changed', 'id', changed.id, 'tokenHash', changed.token_hash,
         'origin', $4::text)::text)
       FROM changed`,
      [id, at, CHANGES_CHANNEL, this.#origin],
    )
    const pats = rows.map(shared.toPat)
    for (const pat of pats)
      this.#emit({ kind: 'pat_changed', id: pat.id, tokenHash: pat.tokenHash })
    return pats
  }

  async getPat(id: string): Promise<PatRecord | undefined> {
    const rows = await this.#query<shared.PatRow>('SELECT * FROM pats WHERE id = $1', [id])
    return rows[0] && shared.toPat(rows[0])
  }

  async findPatByHash(tokenHash: string): Promise<PatRecord | undefined> {
    const rows = await this.#query<shared.PatRow>('SELECT * FROM pats WHERE token_hash = $1', [
      tokenHash,
    ])
    return rows[0] && shared.toPat(rows[0])
  }

  async listPats(
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
    const rows = await this.#query<shared.PatRow>(
      `SELECT * FROM pats WHERE ${where.join(' AND ')}
       ORDER BY created_at DESC, id DESC LIMIT $${params.length}`,
      params,
    )
    return toPage(rows.map(shared.toPat), limit, (pat) => ({ at: pat.createdAt, id: pat.id }))
  }

  async revokePat(id: string, at: number): Promise<PatRecord | undefined> {
    // COALESCE keeps the first revocation time: revoking twice is a no-op that still
    // answers with the record (and re-notifies, which is harmless).
    const rows = await this.#query<shared.PatRow>(
      `WITH changed AS (
         UPDATE pats SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING *)
       SELECT changed.*, pg_notify($3, json_build_object(
         'kind', 'pat_changed', 'id', changed.id, 'tokenHash', changed.token_hash,
         'origin', $4::text)::text)
       FROM changed`,
      [id, at, CHANGES_CHANNEL, this.#origin],
    )
    if (!rows[0]) return undefined
    const pat = shared.toPat(rows[0])
    this.#emit({ kind: 'pat_changed', id: pat.id, tokenHash: pat.tokenHash })
    return pat
  }

  async recordPatUse(uses: ReadonlyMap<string, number>): Promise<void> {
    this.#checkOpen()
    if (uses.size === 0) return
    // One statement for the whole batch; the WHERE makes it forward-only, so a late,
    // older batch from another instance never moves a time back.
    await this.#query(
      `UPDATE pats SET last_used_at = u.at
       FROM unnest($1::text[], $2::bigint[]) AS u(id, at)
       WHERE pats.id = u.id AND (pats.last_used_at IS NULL OR pats.last_used_at < u.at)`,
      [[...uses.keys()], [...uses.values()]],
    )
  }

  async putIssuer(issuer: IssuerConfig, at: number): Promise<void> {
    const { name, config } = shared.issuerValues(issuer)
    await this.#query(
      `WITH written AS (
         INSERT INTO issuers (${shared.ISSUER_COLUMNS}) VALUES ($1, $2::jsonb, $3)
         ON CONFLICT (issuer) DO UPDATE SET config = excluded.config
         RETURNING issuer)
       SELECT pg_notify($4, json_build_object('kind', 'issuers_changed', 'origin', $5::text)::text)
       FROM written`,
      [name, config, at, CHANGES_CHANNEL, this.#origin],
    )
    this.#emit({ kind: 'issuers_changed' })
  }

  async listIssuers(): Promise<readonly StoredIssuer[]> {
    const rows = await this.#query<shared.IssuerRow>(
      `SELECT ${shared.ISSUER_COLUMNS} FROM issuers ORDER BY issuer`,
    )
    return rows.map(shared.toIssuer)
  }

  async removeIssuer(issuer: string): Promise<boolean> {
    const rows = await this.#query(
      `WITH removed AS (DELETE FROM issuers WHERE issuer = $1 RETURNING issuer)
       SELECT pg_notify($2, json_build_object('kind', 'issuers_changed', 'origin', $3::text)::text)
       FROM removed`,
      [issuer, CHANGES_CHANNEL, this.#origin],
    )
    if (rows.length === 0) return false
    this.#emit({ kind: 'issuers_changed' })
    return true
  }

  async appendAudit(
    events: readonly StoredAuditEvent[],
    options?: AppendAuditOptions,
  ): Promise<void> {
    this.#checkOpen()
    if (events.length === 0) return
    // Column-wise: one array per column, as unnest takes them.
    const rows = events.map(shared.auditValues)
    const values = AUDIT_COLUMN_INDEXES.map((i) => rows.map((row) => row[i]))
    if (options?.queue === false) {
      // No delivery configured: store only (one statement, all or nothing, ids deduplicated).
      await this.#query(`${INSERT_AUDIT} ON CONFLICT (id) DO NOTHING`, values)
      return
    }
    // One statement: the batch is stored entirely or not at all. An id already stored is
    // skipped, so a retried batch that did commit is not duplicated; only the rows stored
    // now are queued in the outbox (in batch order), so delivered events are not re-queued.
    await this.#query(
      `WITH inserted AS (
         ${INSERT_AUDIT}
         ON CONFLICT (id) DO NOTHING
         RETURNING id)
       INSERT INTO event_outbox (event_id)
       SELECT inserted.id FROM inserted
       JOIN unnest($1::text[]) WITH ORDINALITY AS batch (id, n) ON batch.id = inserted.id
       ORDER BY batch.n`,
      values,
    )
  }

  async claimOutbox(now: number, limit: number, leaseMs: number): Promise<readonly OutboxEntry[]> {
    // SKIP LOCKED: instances claiming at once each take different rows instead of waiting.
    const rows = await this.#query<shared.AuditRow & { attempts: number; seq: Int8 }>(
      `WITH due AS (
         SELECT seq FROM event_outbox
         WHERE next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1)
         ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED),
       claimed AS (
         UPDATE event_outbox o SET claimed_until = $1::bigint + $3::bigint
         FROM due WHERE o.seq = due.seq RETURNING o.seq, o.event_id, o.attempts)
       SELECT claimed.seq, claimed.attempts, a.*
       FROM claimed JOIN audit_events a ON a.id = claimed.event_id
       ORDER BY claimed.seq`,
      [now, limit, leaseMs],
    )
    return rows.map((row) => ({ event: shared.toAudit(row), attempts: row.attempts }))
  }

  async completeOutbox(eventIds: readonly string[]): Promise<void> {
    this.#checkOpen()
    if (eventIds.length === 0) return
    await this.#query('DELETE FROM event_outbox WHERE event_id = ANY($1::text[])', [[...eventIds]])
  }

  async retryOutbox(
    eventIds: readonly string[],
    nextAttemptAt: number,
    error: string,
  ): Promise<void> {
    this.#checkOpen()
    if (eventIds.length === 0) return
    await this.#query(
      `UPDATE event_outbox SET attempts = attempts + 1, next_attempt_at = $2,
         claimed_until = NULL, last_error = $3
       WHERE event_id = ANY($1::text[])`,
      [[...eventIds], nextAttemptAt, error.slice(0, 500)],
    )
  }

  async outboxStats(): Promise<OutboxStats> {
    const rows = await this.#query<{ pending: Int8; oldest: Int8 | null }>(
      `SELECT count(*) AS pending, min(a.time) AS oldest
       FROM event_outbox o JOIN audit_events a ON a.id = o.event_id`,
    )
    const row = rows[0] as { pending: Int8; oldest: Int8 | null }
    return { pending: Number(row.pending), oldestTime: toMs(row.oldest) }
  }

  async clearOutbox(): Promise<number> {
    const rows = await this.#query('DELETE FROM event_outbox RETURNING seq')
    return rows.length
  }

  async listAudit(tenantId: string, page: PageRequest): Promise<Page<StoredAuditEvent>> {
    const limit = checkPageLimit(page.limit)
    const params: unknown[] = [tenantId]
    let after = ''
    if (page.cursor !== undefined) {
      const position = decodeCursor(page.cursor)
      params.push(position.at, position.id)
      after = 'AND (time, id) < ($2::bigint, $3::text)'
    }
    params.push(limit + 1)
    const rows = await this.#query<shared.AuditRow>(
      `SELECT * FROM audit_events WHERE tenant_id = $1 ${after}
       ORDER BY time DESC, id DESC LIMIT $${params.length}`,
      params,
    )
    return toPage(rows.map(shared.toAudit), limit, (event) => ({ at: event.time, id: event.id }))
  }

  watch(listener: (change: StoreChange) => void): () => void {
    // Wrapped so the same function may subscribe twice and unsubscribe each separately.
    const entry = (change: StoreChange) => listener(change)
    this.#listeners.add(entry)
    return () => {
      this.#listeners.delete(entry)
    }
  }

  #emit(change: StoreChange): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(change)
      } catch (error) {
        this.#logger?.warn({ err: error, change: change.kind }, 'store watch listener threw')
      }
    }
  }

  #checkOpen(): void {
    if (this.#closed) throw new Error('postgres store is closed')
  }

  async #query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params?: unknown[],
  ): Promise<R[]> {
    this.#checkOpen()
    try {
      const result = await this.#pool.query<R>(sql, params)
      return result.rows
    } catch (error) {
      throw translate(error)
    }
  }
}

/** Postgres constraint errors (SQLSTATE) as the Store contract states them. */
function translate(error: unknown): unknown {
  const constraint = error instanceof pg.DatabaseError ? error.constraint : undefined
  return shared.translateConstraint(
    error,
    constraintOf(error),
    `a row (${constraint ?? 'constraint'})`,
  )
}

function constraintOf(error: unknown): shared.ConstraintKind {
  if (!(error instanceof pg.DatabaseError)) return undefined
  if (error.code === UNIQUE_VIOLATION) return 'unique'
  if (error.code === FOREIGN_KEY_VIOLATION) return 'foreign_key'
  return undefined
}

// bigint columns arrive as strings (pg does not assume they fit a JS number); every time
// we store is epoch milliseconds, well inside Number.MAX_SAFE_INTEGER.
type Int8 = string

const AUDIT_COLUMN_INDEXES = [0, 1, 2, 3, 4, 5, 6, 7, 8] as const

/** PAT column values ($1..$14); Postgres keeps the permission list as a text[]. */
const pgPatValues = (record: PatRecord) => [...shared.patValues(record, (list) => [...list])]

const toMs = (value: Int8 | null): number | null => (value === null ? null : Number(value))
