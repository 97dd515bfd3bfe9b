/**
 * The embedded store: one SQLite file through `node:sqlite` (the only module that imports
 * it, since its API is still moving). Every method does synchronous work inside an async
 * function, so failures always arrive as rejections.
 *
 * The CLI and the server are different processes on the same file, so the database runs in
 * WAL mode (readers never block the writer) with a busy timeout (a writer waits for the
 * other process's write instead of failing at once).
 */
import { DatabaseSync, type SQLInputValue, type StatementSync } from 'node:sqlite'
import { type Clock, systemClock } from '../core/ports.ts'
import { ChangeFollower } from './change-log.ts'
import * as shared from './rows.ts'
import { readChangesAfter } from './sql/change-log.ts'
import { type SqlDb, sqliteDialect } from './sql/db.ts'
import { SqlStore } from './sql/sql-store.ts'
import { sqliteMigrations } from './sqlite-migrations.ts'
import type {
  QuotaCount,
  QuotaReservation,
  Store,
  StoreChange,
  StoreTransaction,
  UsageQuery,
  UsageResolution,
  UsageRow,
} from './store.ts'

/** Options of `openSqliteStore`. */
export interface SqliteStoreOptions {
  /** Stamps `schema_migrations.applied_at`. Default: the system clock. */
  readonly clock?: Clock | undefined
  /** How long a write waits for another process's write lock, in ms. Default 5000. */
  readonly busyTimeoutMs?: number | undefined
  /**
   * How often `watch` reads the change log for commits by other processes (the CLI, other
   * workers), in ms. Default 500; 0 disables it (then only this object's own changes are
   * delivered).
   */
  readonly externalChangePollMs?: number | undefined
  /**
   * Deletes change-log entries older than `before` (retention). Default: on this connection;
   * the write-behind writer thread takes it over (sqlite-writer.ts), so that a delete that
   * waits for another process's write lock never waits on the event loop.
   */
  readonly pruneChangeLog?: ((before: number) => Promise<unknown>) | undefined
}

/**
 * Opens (creating if needed) the SQLite database at `path`. It does NOT migrate: call
 * `migrate()` before anything else (idempotent, safe when two processes race), so that
 * opening a file never changes its schema behind the operator's back.
 *
 * @example
 *   const store = openSqliteStore(join(dataDir, 'tokengate.db'))
 *   await store.migrate()
 */
export function openSqliteStore(path: string, options: SqliteStoreOptions = {}): SqliteStore {
  return new SqliteStore(path, options)
}

const LATEST_VERSION = shared.latestVersion(sqliteMigrations)

// SQLite extended result codes for the constraint violations we translate.
const SQLITE_CONSTRAINT_PRIMARYKEY = 1555
const SQLITE_CONSTRAINT_UNIQUE = 2067
const SQLITE_CONSTRAINT_FOREIGNKEY = 787

function prepareStatements(db: DatabaseSync) {
  return {
    // One statement: a later period starts the count again, the grant never takes the count
    // past the limit, and last_grant says what this call got (SET reads the old row).
    reserveQuota: db.prepare(`INSERT INTO quota_usage (counter, period_start, used, last_grant)
      VALUES ($counter, $period, min($want, $limit), min($want, $limit))
      ON CONFLICT (counter) DO UPDATE SET
        last_grant = CASE WHEN quota_usage.period_start < excluded.period_start
          THEN excluded.used ELSE max(0, min($want, $limit - quota_usage.used)) END,
        used = CASE WHEN quota_usage.period_start < excluded.period_start
          THEN excluded.used ELSE quota_usage.used + max(0, min($want, $limit - quota_usage.used)) END,
        period_start = max(quota_usage.period_start, excluded.period_start)
      RETURNING last_grant, used, period_start, generation`),
    releaseQuota: db.prepare(`UPDATE quota_usage SET used = max(0, used - ?)
      WHERE counter = ? AND period_start = ? AND generation = ?`),
    readQuota: db.prepare('SELECT period_start, used FROM quota_usage WHERE counter = ?'),
    resetQuota: db.prepare(`UPDATE quota_usage SET used = 0, last_grant = 0,
      generation = generation + 1 WHERE counter = ?`),
    addUsage: db.prepare(`INSERT INTO usage_counts (${shared.USAGE_COLUMNS})
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (scope, subject, resolution, bucket_start) DO UPDATE SET
        allowed = allowed + excluded.allowed,
        unauthorized = unauthorized + excluded.unauthorized,
        forbidden = forbidden + excluded.forbidden,
        limited = limited + excluded.limited`),
    readUsage: db.prepare(`SELECT ${shared.USAGE_COLUMNS} FROM usage_counts
      WHERE scope = ? AND subject = ? AND resolution = ? AND bucket_start >= ? AND bucket_start < ?
      ORDER BY bucket_start`),
    topKeys: db.prepare(`SELECT subject, tenant_id, sum(allowed) AS allowed,
        sum(unauthorized) AS unauthorized,
        sum(forbidden) AS forbidden, sum(limited) AS limited
      FROM usage_counts
      WHERE scope = 'key' AND tenant_id = ? AND resolution = ? AND bucket_start >= ? AND bucket_start < ?
      GROUP BY subject, tenant_id
      ORDER BY sum(allowed) + sum(unauthorized) + sum(forbidden) + sum(limited) DESC, subject
      LIMIT ?`),
    pruneUsage: db.prepare(`DELETE FROM usage_counts
      WHERE (scope, subject, resolution, bucket_start) IN (
        SELECT scope, subject, resolution, bucket_start FROM usage_counts
        WHERE resolution = ? AND bucket_start < ? LIMIT ?)`),
  }
}

type Statements = ReturnType<typeof prepareStatements>

/** The SQLite `Store`. Create it with `openSqliteStore`. */
export class SqliteStore extends SqlStore implements Store {
  readonly kind = 'sqlite'
  readonly #db: DatabaseSync
  readonly #path: string
  readonly #options: SqliteStoreOptions
  readonly #clock: Clock
  readonly #ping: StatementSync
  readonly #listeners = new Set<(change: StoreChange) => void>()
  readonly #follower: ChangeFollower
  #statements: Statements | undefined
  /** Statements of the shared SQL (sql/), by their Postgres text, prepared once. */
  readonly #cache = new Map<string, StatementSync>()
  /** Settles when the transaction open on this connection ends. */
  #busy: Promise<void> | undefined
  /** What a transaction's work runs its statements on. */
  readonly #inside: SqlDb = this.#sqlDb(true)
  #closed = false

  constructor(path: string, options: SqliteStoreOptions = {}) {
    super()
    this.#path = path
    this.#options = options
    this.#clock = options.clock ?? systemClock
    this.#follower = new ChangeFollower({
      reader: {
        head: async () => {
          const db = this.#open()
          const exists = db
            .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'change_log'")
            .get()
          // Not migrated yet: nothing was ever logged, so everything logged later follows 0.
          if (!exists) return 0
          return (db.prepare('SELECT max(seq) AS head FROM change_log').get()?.head as number) ?? 0
        },
        readAfter: (seq, limit) => readChangesAfter(this.db, seq, limit),
        prune: async (before) => {
          await (options.pruneChangeLog ?? ((at: number) => this.pruneChangeLog(at)))(before)
        },
      },
      emit: (change) => this.#emit(change),
      pollMs: options.externalChangePollMs ?? 500,
      warn: (_obj, msg) => process.emitWarning(msg),
    })
    this.#db = new DatabaseSync(path, { enableForeignKeyConstraints: true })
    try {
      // busy_timeout first: switching to WAL itself needs a lock another process may hold.
      this.#db.exec(`PRAGMA busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? 5000)}`)
      this.#db.exec('PRAGMA journal_mode = WAL')
      this.#db.exec('PRAGMA foreign_keys = ON')
      // FULL, not WAL's usual NORMAL: a revocation the CLI reported as done must survive a
      // power loss. Hot-path writes (last use, audit) are batched, so the fsync is rare.
      this.#db.exec('PRAGMA synchronous = FULL')
      this.#ping = this.#db.prepare('SELECT 1')
    } catch (error) {
      this.#db.close()
      throw error
    }
  }

  async migrate(): Promise<number[]> {
    const db = this.#open()
    const applied = this.#transaction(() => {
      db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`)
      const done = db
        .prepare('SELECT version FROM schema_migrations')
        .all()
        .map((row) => row.version as number)
      const record = db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)')
      const now: number[] = []
      for (const migration of shared.pendingMigrations(sqliteMigrations, done)) {
        db.exec(migration.sql)
        record.run(migration.version, this.#clock.now())
        now.push(migration.version)
      }
      return now
    })
    this.#statements = undefined
    this.#cache.clear()
    return applied
  }

  async ping(): Promise<void> {
    this.#open()
    this.#ping.get()
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#listeners.clear()
    this.#follower.close()
    this.#statements = undefined
    this.#cache.clear()
    this.#db.close()
  }

  /**
   * The work runs on a connection of its own to the same file, in one `BEGIN IMMEDIATE`
   * transaction: calls on this object meanwhile (the server's write-behind) are not part of
   * it, and other writers wait for it (busy timeout), as for any write.
   */
  async transaction<T>(work: (tx: StoreTransaction) => Promise<T>): Promise<T> {
    this.#open()
    const tx = new SqliteStore(this.#path, { ...this.#options, externalChangePollMs: 0 })
    let result: T
    try {
      const db = tx.#open()
      db.exec('BEGIN IMMEDIATE')
      try {
        result = await work(tx)
        db.exec('COMMIT')
      } catch (error) {
        if (db.isTransaction) db.exec('ROLLBACK')
        throw error
      }
    } finally {
      await tx.close()
    }
    await this.#delivered()
    return result
  }

  async reserveQuota(
    counter: string,
    periodStart: number,
    limit: number,
    want: number,
  ): Promise<QuotaReservation> {
    const row = this.#s().reserveQuota.get({ counter, period: periodStart, limit, want }) as {
      last_grant: number
      used: number
      period_start: number
      generation: number
    }
    return {
      granted: row.last_grant,
      used: row.used,
      periodStart: row.period_start,
      generation: row.generation,
    }
  }

  async releaseQuota(
    counter: string,
    periodStart: number,
    generation: number,
    count: number,
  ): Promise<void> {
    this.#s().releaseQuota.run(count, counter, periodStart, generation)
  }

  async readQuota(counters: readonly string[]): Promise<ReadonlyMap<string, QuotaCount>> {
    const s = this.#s()
    const found = new Map<string, QuotaCount>()
    for (const counter of counters) {
      const row = s.readQuota.get(counter) as { period_start: number; used: number } | undefined
      if (row) found.set(counter, { periodStart: row.period_start, used: row.used })
    }
    return found
  }

  async resetQuota(counter: string): Promise<void> {
    this.#s().resetQuota.run(counter)
  }

  async addUsage(rows: readonly UsageRow[]): Promise<void> {
    const s = this.#s()
    if (rows.length === 0) return
    this.#transaction(() => {
      for (const row of rows) s.addUsage.run(...shared.usageValues(row))
    })
  }

  async readUsage(query: UsageQuery): Promise<readonly UsageRow[]> {
    const rows = this.#s().readUsage.all(
      query.scope,
      query.subject,
      query.resolution,
      query.since,
      query.until,
    ) as unknown as shared.UsageCountRow[]
    return rows.map(shared.toUsage)
  }

  async topKeys(
    tenantId: string,
    resolution: UsageResolution,
    since: number,
    until: number,
    limit: number,
  ) {
    const rows = this.#s().topKeys.all(
      tenantId,
      resolution,
      since,
      until,
      limit,
    ) as unknown as shared.UsageCountRow[]
    return rows.map(shared.toKeyUsage)
  }

  async pruneUsage(resolution: UsageResolution, before: number, limit: number): Promise<number> {
    return Number(this.#s().pruneUsage.run(resolution, before, limit).changes)
  }

  /**
   * Changes are delivered in change-log order (change-log.ts): those made through THIS
   * object before the method that made them resolves; those another process makes to the
   * same file (the CLI revoking a token, another worker) within `externalChangePollMs`.
   */
  watch(listener: (change: StoreChange) => void): () => void {
    const wrapped = (change: StoreChange) => listener(change)
    this.#listeners.add(wrapped)
    if (!this.#closed) {
      void this.#follower.start().catch(() => {})
      this.#follower.poll(true)
    }
    return () => {
      this.#listeners.delete(wrapped)
      if (this.#listeners.size === 0) this.#follower.poll(false)
    }
  }

  protected readonly db: SqlDb = this.#sqlDb(false)

  /**
   * The connection as a SqlDb. `inside`: the view a transaction's work gets; outside it,
   * statements wait while this connection has a transaction open, so that other work never
   * joins it (node:sqlite is synchronous, but a transaction's work awaits between statements).
   */
  #sqlDb(inside: boolean): SqlDb {
    const statement = async (sql: string) => {
      if (!inside) while (this.#busy) await this.#busy
      return this.#statement(sql)
    }
    const db: SqlDb = {
      dialect: sqliteDialect,
      all: async <R extends object>(sql: string, params: readonly unknown[] = []) => {
        const prepared = await statement(sql)
        return checked(() => prepared.all(...(params as SQLInputValue[]))) as R[]
      },
      run: async (sql, params = []) => {
        const prepared = await statement(sql)
        return Number(checked(() => prepared.run(...(params as SQLInputValue[]))).changes)
      },
      atomic: (work) => (inside ? this.#nested(work) : this.#atomic(work)),
      change: async (work) => {
        const result = await db.atomic(work)
        if (!inside) await this.#delivered()
        return result
      },
    }
    return db
  }

  /** `work` in one transaction of this connection (a savepoint inside `transaction()`'s). */
  async #atomic<T>(work: (db: SqlDb) => Promise<T>): Promise<T> {
    while (this.#busy) await this.#busy
    const done = this.#nested(work)
    this.#busy = done.then(
      () => undefined,
      () => undefined,
    )
    try {
      return await done
    } finally {
      this.#busy = undefined
    }
  }

  async #nested<T>(work: (db: SqlDb) => Promise<T>): Promise<T> {
    const db = this.#open()
    this.#s()
    // IMMEDIATE takes the write lock up front, so two processes writing at once queue on
    // busy_timeout instead of failing halfway with SQLITE_BUSY on lock upgrade.
    const savepoint = db.isTransaction
    db.exec(savepoint ? 'SAVEPOINT step' : 'BEGIN IMMEDIATE')
    try {
      const result = await work(this.#inside)
      db.exec(savepoint ? 'RELEASE step' : 'COMMIT')
      return result
    } catch (error) {
      if (savepoint) {
        db.exec('ROLLBACK TO step')
        db.exec('RELEASE step')
      } else if (db.isTransaction) db.exec('ROLLBACK')
      throw error
    }
  }

  /** The statement for `sql` (written for Postgres, db.ts), rewritten and prepared once. */
  #statement(sql: string): StatementSync {
    this.#s()
    const cache = this.#cache
    let prepared = cache.get(sql)
    if (!prepared) {
      prepared = this.#open().prepare(toSqlite(sql))
      cache.set(sql, prepared)
    }
    return prepared
  }

  /** Delivers what this object just wrote (and anything before it) to its watchers. */
  async #delivered(): Promise<void> {
    if (this.#listeners.size > 0) await this.#follower.catchUp()
  }

  #open(): DatabaseSync {
    if (this.#closed) throw new Error('sqlite store is closed')
    return this.#db
  }

  /** Statements, prepared once on first use after migration. */
  #s(): Statements {
    const db = this.#open()
    if (this.#statements) return this.#statements
    const hasTable = db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
      .get()
    const version = hasTable
      ? ((db.prepare('SELECT max(version) AS v FROM schema_migrations').get()?.v as
          | number
          | null) ?? 0)
      : 0
    if (version !== LATEST_VERSION) {
      throw new Error(
        `sqlite schema is at version ${version}, this tokengate needs ${LATEST_VERSION}: run migrate()`,
      )
    }
    this.#statements = prepareStatements(db)
    return this.#statements
  }

  #transaction<T>(work: () => T): T {
    const db = this.#open()
    // Inside `transaction()`: a savepoint keeps this method's statements together in it.
    if (db.isTransaction) return savepoint(db, work)
    // IMMEDIATE takes the write lock up front, so two processes migrating or writing at once
    // queue on busy_timeout instead of failing halfway with SQLITE_BUSY on lock upgrade.
    db.exec('BEGIN IMMEDIATE')
    try {
      const result = work()
      db.exec('COMMIT')
      return result
    } catch (error) {
      if (db.isTransaction) db.exec('ROLLBACK')
      throw error
    }
  }

  #emit(change: StoreChange): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(change)
      } catch (error) {
        // A listener's bug must not fail the write that already committed.
        process.emitWarning(`store watch listener threw: ${String(error)}`)
      }
    }
  }
}

function savepoint<T>(db: DatabaseSync, work: () => T): T {
  db.exec('SAVEPOINT step')
  try {
    const result = work()
    db.exec('RELEASE step')
    return result
  } catch (error) {
    db.exec('ROLLBACK TO step')
    db.exec('RELEASE step')
    throw error
  }
}

/** Runs a statement, translating SQLite's constraint errors (extended result codes). */
function checked<T>(run: () => T): T {
  try {
    return run()
  } catch (error) {
    throw shared.translateConstraint(error, constraintOf(error), 'a row')
  }
}

/**
 * A statement written for Postgres (sql/db.ts) as SQLite reads it: numbered `?N`
 * placeholders, no casts, `max`/`min` for `GREATEST`/`LEAST`, and no row locks (a
 * transaction here holds the database's write lock from its start: `BEGIN IMMEDIATE`).
 */
export function toSqlite(sql: string): string {
  return sql
    .replace(/\$(\d+)/g, '?$1')
    .replace(/::[a-z]+(\[\])?/g, '')
    .replace(/\bGREATEST\(/g, 'max(')
    .replace(/\bLEAST\(/g, 'min(')
    .replace(/\s+FOR UPDATE( SKIP LOCKED)?/g, '')
    .replace(/\bILIKE\b/g, 'LIKE')
}

function constraintOf(error: unknown): shared.ConstraintKind {
  const code = (error as { errcode?: unknown }).errcode
  if (code === SQLITE_CONSTRAINT_PRIMARYKEY || code === SQLITE_CONSTRAINT_UNIQUE) return 'unique'
  if (code === SQLITE_CONSTRAINT_FOREIGNKEY) return 'foreign_key'
  return undefined
}
