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
import { type Clock, systemClock } from '../core/ports.ts'
import { ChangeFollower, type ChangeLogReader } from './change-log.ts'
import { postgresMigrations } from './postgres-migrations.ts'
import { type ChangeFeed, startChangeFeed, type WarnLogger } from './postgres-notify.ts'
import * as shared from './rows.ts'
import { readChangesAfter } from './sql/change-log.ts'
import { postgresDialect, type SqlDb } from './sql/db.ts'
import { SqlStore } from './sql/sql-store.ts'

export type { ChangeFeedStatus } from './store.ts'

import type { ChangeFeedStatus, Store, StoreChange, StoreTransaction } from './store.ts'

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

const UNIQUE_VIOLATION = '23505'
const UNDEFINED_TABLE = '42P01'
const FOREIGN_KEY_VIOLATION = '23503'

class PgStore extends SqlStore implements PostgresStore {
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

  /** `within`: the view of `store` inside one of its transactions, on `client`. */
  constructor(
    url: string,
    options: PostgresStoreOptions,
    within?: { readonly store: PgStore; readonly client: pg.PoolClient },
  ) {
    super()
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
      readAfter: (seq, limit) =>
        this.#beforeMigration(readChangesAfter(this.db, seq, limit), {
          entries: [],
          lowest: null,
        }),
      prune: async (before) => {
        await this.pruneChangeLog(before)
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
      if (lock) await client.query(lock, lockParams)
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
    // Called on a transaction's own view: part of that transaction.
    if (this.#client) return work(this)
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

  /** The pool's SqlDb; in a transaction's view, its client's. */
  protected readonly db: SqlDb = this.#sqlDb(undefined)

  /** A SqlDb over `client` (inside a transaction: statements join it) or the pool. */
  #sqlDb(client: pg.PoolClient | undefined): SqlDb {
    const query = async (sql: string, params: readonly unknown[] = []) => {
      this.#checkOpen()
      try {
        return await (client ?? this.#client ?? this.#pool).query(sql, [...params])
      } catch (error) {
        throw translate(error)
      }
    }
    const inside = () => client !== undefined || this.#client !== undefined
    const db: SqlDb = {
      dialect: postgresDialect,
      checkOpen: () => this.#checkOpen(),
      all: async <R extends object>(sql: string, params?: readonly unknown[]) =>
        (await query(sql, params)).rows as R[],
      run: async (sql, params) => (await query(sql, params)).rowCount ?? 0,
      atomic: (work) =>
        inside() ? work(db) : this.#transaction('', [], (c) => work(this.#sqlDb(c))),
      change: (work) => (inside() ? work(db) : this.#changed(work)),
    }
    return db
  }

  /**
   * A change other instances cache, in a transaction that takes the change log's lock first
   * (before any row lock: two multi-row changes queue instead of deadlocking in the
   * trigger), then delivered to this store's own watchers before it resolves, so a caller's
   * next read sees its cache already dropped.
   */
  async #changed<T>(work: (db: SqlDb) => Promise<T>): Promise<T> {
    this.#checkOpen()
    // A watcher must get this change: the follower's starting point is taken before it.
    if (this.#listeners.size > 0) await this.#follower.start().catch(() => {})
    const result = await this.#transaction('LOCK TABLE change_log IN EXCLUSIVE MODE', [], (c) =>
      work(this.#sqlDb(c)),
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
