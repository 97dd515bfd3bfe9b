/**
 * The Postgres store, for many stateless instances on one database: the shared SQL (sql/)
 * over a pool (postgres-connection.ts). A mutation that other instances cache is logged in
 * `change_log` by a trigger in the same transaction; each instance follows the log by
 * sequence (change-log.ts), woken by the trigger's NOTIFY on its LISTEN connection
 * (postgres-notify.ts) and by a short poll. `open-store.ts` loads it on demand.
 *
 * @example
 *   const store = await openPostgresStore('postgres://tokengate@db/tokengate')
 *   await store.migrate()
 */
import type pg from 'pg'
import { type Clock, systemClock } from '../core/ports.ts'
import type { ChangeLogReader } from './change-log.ts'
import { PostgresConnection, type PostgresHooks } from './postgres-connection.ts'
import { postgresMigrations } from './postgres-migrations.ts'
import { type ChangeFeed, startChangeFeed, type WarnLogger } from './postgres-notify.ts'
import * as shared from './rows.ts'
import { readChangesAfter } from './sql/change-log.ts'
import type { SqlDb } from './sql/db.ts'
import { SqlStore } from './sql/sql-store.ts'

export type { ChangeFeedStatus } from './store.ts'

import type { ChangeFeedStatus, Store, StoreTransaction } from './store.ts'

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

const UNDEFINED_TABLE = '42P01'

class PgStore extends SqlStore implements PostgresStore {
  readonly kind = 'postgres' as const
  readonly #conn: PostgresConnection
  /** Set on the store a `transaction` hands its work: every query goes through it. */
  readonly #client: pg.PoolClient | undefined
  readonly #clock: Clock
  readonly #logger: WarnLogger | undefined
  protected readonly db: SqlDb
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
    this.#conn = within
      ? within.store.#conn
      : new PostgresConnection(url, options.poolSize ?? 10, (obj, msg) => this.warn(obj, msg))
    const hooks: PostgresHooks = {
      checkOpen: () => this.#checkOpen(),
      change: (work) => this.#underChangeLock((c) => work(this.#conn.sqlDb(c, hooks))),
    }
    this.db = this.#conn.sqlDb(this.#client, hooks)
    if (within) {
      this.listeners = within.store.listeners
      this.follower = within.store.follower
    } else this.follow(this.#changeLogReader(), options.changePollMs)
  }

  protected get closed(): boolean {
    return this.#closed
  }

  protected warn(obj: object, message: string): void {
    this.#logger?.warn(obj, message)
  }

  #changeLogReader(): ChangeLogReader {
    return {
      head: async () => {
        const rows = await this.#beforeMigration(
          this.db.all<{ head: string }>('SELECT COALESCE(max(seq), 0) AS head FROM change_log'),
          [],
        )
        return Number(rows[0]?.head ?? 0)
      },
      readAfter: (seq, limit) =>
        this.#beforeMigration(readChangesAfter(this.db, seq, limit), {
          entries: [],
          lowest: null,
        }),
      prune: (before) => this.pruneChangeLog(before).then(() => {}),
    }
  }

  async start(url: string, options: PostgresStoreOptions): Promise<void> {
    if (options.listen === false) {
      await this.ping()
      return
    }
    await this.follower.start()
    this.#feed = await startChangeFeed({
      ...options.changeFeed,
      connectionString: options.listenUrl ?? url,
      logger: this.#logger,
      onWake: () => void this.follower.catchUp(),
      sendProbe: (channel) => this.db.all('SELECT pg_notify($1, $2)', [channel, '']),
    })
  }

  get changeFeed(): ChangeFeedStatus {
    const { connected = false, backendPid, delivering } = this.#feed ?? {}
    return { connected, backendPid, delivering, ...this.follower.status }
  }

  async migrate(): Promise<number[]> {
    this.#checkOpen()
    // One transaction under a transaction-scoped advisory lock: N instances starting at
    // once queue here; the first applies, the rest then see nothing pending. Postgres DDL
    // is transactional, so a failed migration leaves neither tables nor a version row,
    // and the lock is released even if this connection dies.
    return this.#conn.transaction('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY], (c) =>
      shared.applyMigrations(
        {
          exec: (script) => c.query(script),
          all: async (sql, params = []) => (await c.query(sql, [...params])).rows,
        },
        postgresMigrations,
        'CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)',
        this.#clock.now(),
      ),
    )
  }

  async transaction<T>(work: (tx: StoreTransaction) => Promise<T>): Promise<T> {
    this.#checkOpen()
    // Called on a transaction's own view: part of that transaction.
    if (this.#client) return work(this)
    return this.#underChangeLock(async (client) => {
      const tx = this.#view(client)
      try {
        return await work(tx)
      } finally {
        tx.#closed = true
      }
    })
  }

  /** The view of this store inside the transaction on `client`. */
  #view(client: pg.PoolClient): PgStore {
    return new PgStore('', { clock: this.#clock, logger: this.#logger }, { store: this, client })
  }

  /**
   * `work` in a transaction that takes the change log's lock first, as every change does
   * (before any row lock: two multi-row changes queue instead of deadlocking in the
   * trigger); what it logged is delivered to this store's own watchers before it resolves,
   * so a caller's next read sees its cache already dropped.
   */
  async #underChangeLock<T>(work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    this.#checkOpen()
    // A watcher must get this change: the follower's starting point is taken before it.
    if (this.listeners.size > 0) await this.follower.start().catch(() => {})
    const result = await this.#conn.transaction('LOCK TABLE change_log IN EXCLUSIVE MODE', [], work)
    if (this.listeners.size > 0) await this.follower.catchUp()
    return result
  }

  /** Not migrated yet: nothing was ever logged, so everything logged later follows 0. */
  async #beforeMigration<T>(query: Promise<T>, empty: T): Promise<T> {
    try {
      return await query
    } catch (error) {
      if ((error as { code?: unknown }).code === UNDEFINED_TABLE) return empty
      throw error
    }
  }

  async ping(): Promise<void> {
    await this.db.all('SELECT 1')
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    // A transaction's view owns nothing: the transaction releases its connection.
    if (this.#client) return
    this.listeners.clear()
    this.follower.close()
    await this.#feed?.close()
    await this.#conn.end()
  }

  #checkOpen(): void {
    if (this.#closed) {
      throw new Error(this.#client ? 'the transaction has ended' : 'postgres store is closed')
    }
  }
}
