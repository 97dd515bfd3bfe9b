/**
 * The Postgres store, for running many stateless instances on one database. Only this
 * file and `postgres-notify.ts` import `pg`; `open-store.ts` loads it on demand.
 *
 * Queries go through a `pg.Pool` as plain parameterized statements (no named prepared
 * statements, so PgBouncer in transaction pooling works). A mutation that other instances
 * cache (revoke, rotate, tenant and issuer writes) is logged in `change_log` by a trigger in
 * the same transaction; each instance follows the log by sequence (change-log.ts), woken by
 * the trigger's NOTIFY on its LISTEN connection (postgres-notify.ts) and by a short poll.
 *
 * @example
 *   const store = await openPostgresStore('postgres://tokengate@db/tokengate')
 *   await store.migrate()
 */
import pg from 'pg'
import type { IssuerConfig } from '../core/issuer.ts'
import { type Clock, type PatRecord, systemClock, type Tenant } from '../core/ports.ts'
import type { AdminStore } from './admin-store.ts'
import { ChangeFollower, type ChangeLogReader } from './change-log.ts'
import { checkPageLimit, decodeCursor, toPage } from './cursor.ts'
import { createPostgresAdminStore } from './postgres-admin.ts'
import { postgresMigrations } from './postgres-migrations.ts'
import { type ChangeFeed, startChangeFeed, type WarnLogger } from './postgres-notify.ts'
import * as shared from './rows.ts'

export type { ChangeFeedStatus } from './store.ts'

import {
  type AppendAuditOptions,
  type Changed,
  type ChangeFeedStatus,
  checkReplacement,
  type OutboxEntry,
  type OutboxStats,
  type Page,
  type PageRequest,
  type PatChanges,
  type QuotaCount,
  type QuotaReservation,
  type Store,
  type StoreChange,
  type StoredAuditEvent,
  type StoredIssuer,
  type StoredPolicy,
  type StoreTransaction,
  type TenantChanges,
  type UsageQuery,
  type UsageResolution,
  type UsageRow,
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
  /**
   * Where the LISTEN connection goes; default `url`. Behind PgBouncer in transaction pooling
   * LISTEN never delivers: point this at Postgres itself (or a session-mode pool).
   */
  readonly listenUrl?: string | undefined
  /** Interval of the change-log poll, in ms (the bound when NOTIFY does not arrive). Default 500. */
  readonly changePollMs?: number | undefined
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

/** Inserts a batch of usage rows given as nine parallel arrays, adding to existing buckets. */
const ADD_USAGE = `INSERT INTO usage_counts (${shared.USAGE_COLUMNS})
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[],
    $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[])
  ON CONFLICT (scope, subject, resolution, bucket_start) DO UPDATE SET
    allowed = usage_counts.allowed + excluded.allowed,
    unauthorized = usage_counts.unauthorized + excluded.unauthorized,
    forbidden = usage_counts.forbidden + excluded.forbidden,
    limited = usage_counts.limited + excluded.limited`

/** The type of each PAT column, in PAT_COLUMNS order (for typed placeholders). */
const PAT_TYPES = [
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
] as const

/** `$1::text, $2::text, …` for a PAT's values starting at parameter `first`. */
function patPlaceholders(first: number): string {
  return PAT_TYPES.map((type, i) => `$${first + i}::${type}`).join(', ')
}

const PAT_EDIT_TYPES = ['text', 'text[]', 'bigint', 'bigint', 'jsonb', 'jsonb', 'jsonb', 'text']

const UNIQUE_VIOLATION = '23505'
const UNDEFINED_TABLE = '42P01'
const FOREIGN_KEY_VIOLATION = '23503'

class PgStore implements PostgresStore {
  readonly kind = 'postgres' as const
  readonly #pool: pg.Pool
  /** Set on the store a `transaction` hands its work: every query goes through it. */
  readonly #client: pg.PoolClient | undefined
  readonly #clock: Clock
  readonly #logger: WarnLogger | undefined
  readonly #listeners: Set<(change: StoreChange) => void>
  readonly #follower: ChangeFollower
  #feed: ChangeFeed | undefined
  #closed = false
  /** Admin tokens and operator searches (postgres-admin.ts). */
  readonly admin: AdminStore = createPostgresAdminStore((sql, params) => this.#query(sql, params))

  /** `within`: the view of `store` inside one of its transactions, on `client`. */
  constructor(
    url: string,
    options: PostgresStoreOptions,
    within?: { readonly store: PgStore; readonly client: pg.PoolClient },
  ) {
    this.#clock = options.clock ?? systemClock
    this.#logger = options.logger
    this.#client = within?.client
    if (within) {
      this.#pool = within.store.#pool
      this.#listeners = within.store.#listeners
      this.#follower = within.store.#follower
      return
    }
    this.#listeners = new Set()
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
    this.#follower = new ChangeFollower({
      reader: this.#changeLogReader(),
      emit: (change) => this.#emit(change),
      pollMs: options.changePollMs,
      warn: (obj, msg) => this.#logger?.warn(obj, msg),
    })
  }

  #changeLogReader(): ChangeLogReader {
    return {
      head: async () => {
        const rows = await this.#beforeMigration(
          this.#query<{ head: Int8 }>('SELECT COALESCE(max(seq), 0) AS head FROM change_log'),
          [],
        )
        return Number(rows[0]?.head ?? 0)
      },
      readAfter: async (seq, limit) => {
        // One round trip per poll: the lowest kept number always comes back, with the
        // entries after `seq` (none: one row of nulls).
        const rows = await this.#beforeMigration(
          this.#query<{
            seq: Int8 | null
            kind: string
            subject: string
            at: Int8
            lowest: Int8 | null
          }>(
            `SELECT l.seq, l.kind, l.subject, l.at, m.lowest
           FROM (SELECT min(seq) AS lowest FROM change_log) m
           LEFT JOIN LATERAL (SELECT * FROM change_log WHERE seq > $1 ORDER BY seq LIMIT $2) l
             ON true
           ORDER BY l.seq`,
            [seq, limit],
          ),
          [],
        )
        const lowest = rows[0]?.lowest ?? null
        return {
          entries: rows
            .filter((r) => r.seq !== null)
            .map((r) => ({
              seq: Number(r.seq),
              kind: r.kind,
              subject: r.subject,
              at: Number(r.at),
            })),
          lowest: lowest === null ? null : Number(lowest),
        }
      },
      prune: async (before) => {
        await this.#query('DELETE FROM change_log WHERE at < $1', [before])
      },
    }
  }

  async start(url: string, options: PostgresStoreOptions): Promise<void> {
    if (options.listen === false) {
      await this.ping()
      return
    }
    await this.#follower.start()
    this.#feed = await startChangeFeed({
      ...options.changeFeed,
      connectionString: options.listenUrl ?? url,
      logger: this.#logger,
      onWake: () => void this.#follower.catchUp(),
      sendProbe: (channel) => this.#query('SELECT pg_notify($1, $2)', [channel, '']),
    })
  }

  get changeFeed(): ChangeFeedStatus {
    const feed = this.#feed
    const { lastSeq, current } = this.#follower.status
    return {
      connected: feed?.connected ?? false,
      backendPid: feed?.backendPid,
      delivering: feed?.delivering,
      lastSeq,
      current,
    }
  }

  async migrate(): Promise<number[]> {
    this.#checkOpen()
    // One transaction under a transaction-scoped advisory lock: N instances starting at
    // once queue here; the first applies, the rest then see nothing pending. Postgres DDL
    // is transactional, so a failed migration leaves neither tables nor a version row,
    // and the lock is released even if this connection dies.
    return this.#transaction(
      'SELECT pg_advisory_xact_lock($1)',
      [MIGRATION_LOCK_KEY],
      async (client) => {
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
          await client.query(
            'INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)',
            [migration.version, this.#clock.now()],
          )
          applied.push(migration.version)
        }
        return applied
      },
    )
  }

  /**
   * Runs `work` in a transaction that first runs `lock` (its lock held until the end);
   * rolls back on any error. A client that failed mid-transaction is destroyed, not reused.
   */
  async #transaction<T>(
    lock: string,
    lockParams: unknown[],
    work: (client: pg.PoolClient) => Promise<T>,
  ): Promise<T> {
    let client: pg.PoolClient
    try {
      client = await this.#pool.connect()
    } catch (error) {
      throw translate(error)
    }
    let failure: Error | undefined
    // A checked-out client has no error listener of the pool's: without this one, a
    // connection lost mid-transaction (Postgres restarting) would be an uncaught 'error'
    // event and end the process. The query under way rejects with the same error.
    const lost = (error: Error) => {
      failure = error
    }
    client.on('error', lost)
    try {
      await client.query('BEGIN')
      await client.query(lock, lockParams)
      const result = await work(client)
      await client.query('COMMIT')
      return result
    } catch (error) {
      failure = error instanceof Error ? error : new Error(String(error))
      await client.query('ROLLBACK').catch(() => {})
      throw translate(error)
    } finally {
      client.off('error', lost)
      client.release(failure)
    }
  }

  async transaction<T>(work: (tx: StoreTransaction) => Promise<T>): Promise<T> {
    this.#checkOpen()
    if (this.#listeners.size > 0) await this.#follower.start().catch(() => {})
    // The change log's lock first, as every change takes it: the work's writes queue behind
    // other changes (and they behind it) instead of deadlocking in the trigger.
    const result = await this.#transaction(
      'LOCK TABLE change_log IN EXCLUSIVE MODE',
      [],
      async (client) => {
        const tx = new PgStore(
          '',
          { clock: this.#clock, logger: this.#logger },
          {
            store: this,
            client,
          },
        )
        try {
          return await work(tx)
        } finally {
          tx.#closed = true
        }
      },
    )
    if (this.#listeners.size > 0) await this.#follower.catchUp()
    return result
  }

  /** Not migrated yet: nothing was ever logged, so everything logged later follows 0. */
  async #beforeMigration<T>(query: Promise<T>, empty: T): Promise<T> {
    try {
      return await query
    } catch (error) {
      if (error instanceof pg.DatabaseError && error.code === UNDEFINED_TABLE) return empty
      throw error
    }
  }

  async ping(): Promise<void> {
    await this.#query('SELECT 1')
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    // A transaction's view owns nothing: the transaction releases its connection.
    if (this.#client) return
    this.#listeners.clear()
    this.#follower.close()
    await this.#feed?.close()
    await this.#pool.end()
  }

  async createTenant(tenant: { id: string; name: string }, at: number): Promise<Tenant> {
    const rows = await this.#change<shared.TenantRow>(
      `INSERT INTO tenants (${shared.TENANT_COLUMNS}) VALUES ($1, $2, true, $3, NULL) RETURNING ${shared.TENANT_COLUMNS}`,
      [tenant.id, tenant.name, at],
    )
    return shared.toTenant(rows[0] as shared.TenantRow)
  }

  async updateTenant(id: string, changes: TenantChanges): Promise<Changed<Tenant> | undefined> {
    return this.#changeWith(async (query) => {
      const rows = await query<shared.TenantRow>(
        `SELECT ${shared.TENANT_COLUMNS} FROM tenants WHERE id = $1 FOR UPDATE`,
        [id],
      )
      if (!rows[0]) return undefined
      const before = shared.toTenant(rows[0])
      const after = shared.changedTenant(before, changes)
      await query('UPDATE tenants SET name = $2, rate_limit = $3::jsonb WHERE id = $1', [
        id,
        after.name,
        shared.jsonText(after.rateLimit),
      ])
      return { before, after }
    })
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
    const rows = await this.#change<shared.TenantRow>(
      `UPDATE tenants SET enabled = $2 WHERE id = $1 RETURNING ${shared.TENANT_COLUMNS}`,
      [id, enabled],
    )
    return rows[0] && shared.toTenant(rows[0])
  }

  async insertPat(record: PatRecord): Promise<void> {
    await this.#query(
      `INSERT INTO pats (${shared.PAT_COLUMNS}) VALUES (${patPlaceholders(1)})`,
      pgPatValues(record),
    )
  }

  async updatePat(id: string, changes: PatChanges): Promise<Changed<PatRecord> | undefined> {
    return this.#changeWith(async (query) => {
      const rows = await query<shared.PatRow>(
        'SELECT * FROM pats WHERE id = $1 AND revoked_at IS NULL FOR UPDATE',
        [id],
      )
      if (!rows[0]) return undefined
      const before = shared.toPat(rows[0])
      const after = shared.changedPat(before, changes)
      const set = shared.PAT_EDIT_COLUMNS.map(
        (column, i) => `${column} = $${i + 2}::${PAT_EDIT_TYPES[i]}`,
      )
      await query(`UPDATE pats SET ${set.join(', ')} WHERE id = $1`, [
        id,
        ...shared.patEditValues(after, (list) => [...list]),
      ])
      return { before, after }
    })
  }

  async rotatePat(
    oldId: string,
    replacement: PatRecord,
    at: number,
    graceUntil: number,
  ): Promise<PatRecord | undefined> {
    checkReplacement(oldId, replacement, at, graceUntil)
    // One statement, so atomic: the replacement is inserted only if the old token was still
    // current (not revoked, not already rotated).
    const n = shared.PAT_COLUMN_COUNT
    const rows = await this.#change<shared.PatRow>(
      `WITH old AS (
         UPDATE pats SET superseded_at = $${n + 1}, grace_until = $${n + 2}
         WHERE id = $${n + 3} AND revoked_at IS NULL AND superseded_at IS NULL RETURNING *),
       inserted AS (
         INSERT INTO pats (${shared.PAT_COLUMNS})
         SELECT ${patPlaceholders(1)}
         FROM old RETURNING id)
       SELECT old.* FROM old`,
      [...pgPatValues(replacement), at, graceUntil, oldId],
    )
    return rows[0] && shared.toPat(rows[0])
  }

  async revokePatFamily(id: string, at: number): Promise<readonly PatRecord[]> {
    // Row locks make concurrent callers disagree on nothing: each row is revoked by one.
    const rows = await this.#change<shared.PatRow>(
      `WITH RECURSIVE ${shared.rotationFamily('$1')}
       UPDATE pats SET revoked_at = $2
       WHERE id IN (SELECT id FROM down) AND revoked_at IS NULL RETURNING *`,
      [id, at],
    )
    return rows.map(shared.toPat)
  }

  async listPatFamily(id: string): Promise<readonly PatRecord[]> {
    const rows = await this.#query<shared.PatRow>(
      `WITH RECURSIVE ${shared.rotationFamily('$1')}
       SELECT * FROM pats WHERE id IN (SELECT id FROM down) ORDER BY created_at, id`,
      [id],
    )
    return rows.map(shared.toPat)
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
    // answers with the record (and logs nothing: the row did not change).
    const rows = await this.#change<shared.PatRow>(
      'UPDATE pats SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING *',
      [id, at],
    )
    return rows[0] && shared.toPat(rows[0])
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
    await this.#change(
      `INSERT INTO issuers (${shared.ISSUER_COLUMNS}) VALUES ($1, $2::jsonb, $3)
       ON CONFLICT (issuer) DO UPDATE SET config = excluded.config`,
      [name, config, at],
    )
  }

  async getPolicy(name: string): Promise<StoredPolicy | undefined> {
    const rows = await this.#query<{ name: string; text: string; updated_at: Int8 }>(
      'SELECT name, text, updated_at FROM policies WHERE name = $1',
      [name],
    )
    const row = rows[0]
    return row && { name: row.name, text: row.text, updatedAt: Number(row.updated_at) }
  }

  async putPolicy(name: string, text: string, at: number): Promise<void> {
    await this.#change(
      `INSERT INTO policies (name, text, updated_at) VALUES ($1, $2, $3)
       ON CONFLICT (name) DO UPDATE SET text = excluded.text, updated_at = excluded.updated_at`,
      [name, text, at],
    )
  }

  async removePolicy(name: string): Promise<boolean> {
    const rows = await this.#change('DELETE FROM policies WHERE name = $1 RETURNING name', [name])
    return rows.length > 0
  }

  async listIssuers(): Promise<readonly StoredIssuer[]> {
    const rows = await this.#query<shared.IssuerRow>(
      `SELECT ${shared.ISSUER_COLUMNS} FROM issuers ORDER BY issuer`,
    )
    return rows.map(shared.toIssuer)
  }

  async removeIssuer(issuer: string): Promise<boolean> {
    const rows = await this.#change('DELETE FROM issuers WHERE issuer = $1 RETURNING issuer', [
      issuer,
    ])
    return rows.length > 0
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

  async pruneAudit(before: number, limit: number): Promise<number> {
    const rows = await this.#query(
      `DELETE FROM audit_events WHERE id IN (
         SELECT id FROM audit_events a WHERE time < $1 AND NOT EXISTS (
           SELECT 1 FROM event_outbox o WHERE o.event_id = a.id)
         ORDER BY time LIMIT $2)
       RETURNING 1`,
      [before, limit],
    )
    return rows.length
  }

  async reserveQuota(
    counter: string,
    periodStart: number,
    limit: number,
    want: number,
  ): Promise<QuotaReservation> {
    // One statement under the row's lock: a later period starts the count again, the grant
    // never takes the count past the limit, and last_grant says what this call got (SET
    // reads the old row).
    const rows = await this.#query<QuotaRow>(
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
    const row = rows[0] as QuotaRow
    return {
      granted: Number(row.last_grant),
      used: Number(row.used),
      periodStart: Number(row.period_start),
      generation: Number(row.generation),
    }
  }

  async releaseQuota(
    counter: string,
    periodStart: number,
    generation: number,
    count: number,
  ): Promise<void> {
    await this.#query(
      `UPDATE quota_usage SET used = GREATEST(0, used - $4)
       WHERE counter = $1 AND period_start = $2 AND generation = $3`,
      [counter, periodStart, generation, count],
    )
  }

  async readQuota(counters: readonly string[]): Promise<ReadonlyMap<string, QuotaCount>> {
    const rows = await this.#query<{ counter: string; period_start: Int8; used: Int8 }>(
      'SELECT counter, period_start, used FROM quota_usage WHERE counter = ANY($1::text[])',
      [[...counters]],
    )
    return new Map(
      rows.map((r) => [r.counter, { periodStart: Number(r.period_start), used: Number(r.used) }]),
    )
  }

  async resetQuota(counter: string): Promise<void> {
    await this.#query(
      'UPDATE quota_usage SET used = 0, last_grant = 0, generation = generation + 1 WHERE counter = $1',
      [counter],
    )
  }

  async addUsage(rows: readonly UsageRow[]): Promise<void> {
    this.#checkOpen()
    if (rows.length === 0) return
    const values = rows.map(shared.usageValues)
    await this.#query(
      ADD_USAGE,
      AUDIT_COLUMN_INDEXES.map((i) => values.map((row) => row[i])),
    )
  }

  async readUsage(query: UsageQuery): Promise<readonly UsageRow[]> {
    const rows = await this.#query<shared.UsageCountRow>(
      `SELECT ${shared.USAGE_COLUMNS} FROM usage_counts
       WHERE scope = $1 AND subject = $2 AND resolution = $3
         AND bucket_start >= $4 AND bucket_start < $5
       ORDER BY bucket_start`,
      [query.scope, query.subject, query.resolution, query.since, query.until],
    )
    return rows.map(shared.toUsage)
  }

  async topKeys(
    tenantId: string,
    resolution: UsageResolution,
    since: number,
    until: number,
    limit: number,
  ) {
    const rows = await this.#query<shared.UsageCountRow>(
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
    return rows.map(shared.toKeyUsage)
  }

  async pruneUsage(resolution: UsageResolution, before: number, limit: number): Promise<number> {
    const rows = await this.#query(
      `DELETE FROM usage_counts WHERE (scope, subject, resolution, bucket_start) IN (
         SELECT scope, subject, resolution, bucket_start FROM usage_counts
         WHERE resolution = $1 AND bucket_start < $2 LIMIT $3)
       RETURNING 1`,
      [resolution, before, limit],
    )
    return rows.length
  }

  watch(listener: (change: StoreChange) => void): () => void {
    // Wrapped so the same function may subscribe twice and unsubscribe each separately.
    const entry = (change: StoreChange) => listener(change)
    this.#listeners.add(entry)
    void this.#follower.start().catch(() => {})
    this.#follower.poll(true)
    return () => {
      this.#listeners.delete(entry)
      if (this.#listeners.size === 0) this.#follower.poll(false)
    }
  }

  /**
   * Runs one statement that changes something other instances cache, in a transaction that
   * takes the change log's lock first (before any row lock: two multi-row changes queue
   * instead of deadlocking in the trigger), then delivers the logged change to this store's
   * own watchers before resolving, so a caller's next read sees its cache already dropped.
   */
  async #change<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params: unknown[],
  ): Promise<R[]> {
    return this.#changeWith(async (query) => query<R>(sql, params))
  }

  /**
   * A change of several statements (`query` runs each), in one transaction under the change
   * log's lock, delivered to this store's watchers once committed, as `#change` does.
   */
  async #changeWith<T>(
    work: (
      query: <R extends pg.QueryResultRow>(sql: string, params: unknown[]) => Promise<R[]>,
    ) => Promise<T>,
  ): Promise<T> {
    this.#checkOpen()
    // Inside a transaction, which took the lock and delivers the changes once committed.
    if (this.#client) return work((sql, params) => this.#query(sql, params))
    // A watcher must get this change: the follower's starting point is taken before it.
    if (this.#listeners.size > 0) await this.#follower.start().catch(() => {})
    const result = await this.#transaction(
      'LOCK TABLE change_log IN EXCLUSIVE MODE',
      [],
      (client) => work(async (sql, params) => (await client.query(sql, params)).rows),
    )
    if (this.#listeners.size > 0) await this.#follower.catchUp()
    return result
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
    if (this.#closed) {
      throw new Error(this.#client ? 'the transaction has ended' : 'postgres store is closed')
    }
  }

  async #query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params?: unknown[],
  ): Promise<R[]> {
    this.#checkOpen()
    try {
      const result = await (this.#client ?? this.#pool).query<R>(sql, params)
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

type QuotaRow = { last_grant: Int8; used: Int8; period_start: Int8; generation: Int8 }
const toMs = (value: Int8 | null): number | null => (value === null ? null : Number(value))
