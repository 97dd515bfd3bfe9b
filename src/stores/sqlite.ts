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
import type { Store, StoreChange, StoreTransaction } from './store.ts'

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
  /** Whether the schema was found at this build's version (checked before the first statement). */
  #current = false
  /** Statements of the shared SQL (sql/), by their Postgres text, prepared once. */
  readonly #cache = new Map<string, Prepared>()
  /** A transaction's view (`transaction()`): every statement is part of that transaction. */
  #view = false
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
    const applied = await this.#atomic(async () => {
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
    this.#current = false
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
    this.#current = false
    this.#cache.clear()
    this.#db.close()
  }

  /**
   * The work runs on a connection of its own to the same file, in one `BEGIN IMMEDIATE`
   * transaction: calls on this object meanwhile (the server's write-behind) are not part of
   * it, and other writers wait for it (busy timeout), as for any write.
   */
  async transaction<T>(work: (tx: StoreTransaction) => Promise<T>): Promise<T> {
    // Called on a transaction's own view: part of that transaction.
    if (this.#view) return this.#nested(() => work(this))
    this.#open()
    const release = await turn(this.#path)
    const tx = new SqliteStore(this.#path, { ...this.#options, externalChangePollMs: 0 })
    tx.#view = true
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
      release()
      await tx.close()
    }
    await this.#delivered()
    return result
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
   * The connection as a SqlDb. `inside`: the view a transaction's work gets. Outside it, a
   * statement waits for the transaction open on this file in this thread (`turn`) when it
   * would join it (the same connection) or write (another connection: it would block the
   * thread on the file's write lock); reads of other connections go on (WAL).
   */
  #sqlDb(inside: boolean): SqlDb {
    const statement = async (sql: string) => {
      const prepared = this.#statement(sql)
      if (!inside && !this.#view && open.has(this.#path)) {
        if (prepared.writes || this.#db.isTransaction) await waitTurn(this.#path)
      }
      return prepared.statement
    }
    const db: SqlDb = {
      dialect: sqliteDialect,
      checkOpen: () => void this.#open(),
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
    if (this.#view) return this.#nested(work)
    const release = await turn(this.#path)
    try {
      return await this.#nested(work)
    } finally {
      release()
    }
  }

  async #nested<T>(work: (db: SqlDb) => Promise<T>): Promise<T> {
    const db = this.#open()
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
  #statement(sql: string): Prepared {
    this.#s()
    let prepared = this.#cache.get(sql)
    if (!prepared) {
      const text = toSqlite(sql)
      prepared = { statement: this.#open().prepare(text), writes: WRITES.test(text) }
      this.#cache.set(sql, prepared)
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

  /** Refuses statements until the schema is at this build's version (checked once). */
  #s(): void {
    const db = this.#open()
    if (this.#current) return
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
    this.#current = true
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

/**
 * The transaction open on each database file in this thread. node:sqlite is synchronous: a
 * statement on another connection to a file whose write lock is held here would block the
 * thread for the busy timeout, while the holder, awaiting between its statements, could not
 * finish. So in one thread a file's transactions take turns, and other statements wait.
 */
const open = new Map<string, Promise<void>>()

interface Prepared {
  readonly statement: StatementSync
  readonly writes: boolean
}
const WRITES = /\b(INSERT|UPDATE|DELETE|REPLACE)\b/i

async function waitTurn(path: string): Promise<void> {
  for (let held = open.get(path); held; held = open.get(path)) await held
}

/** Waits for the file's turn and takes it; the result gives it back. */
async function turn(path: string): Promise<() => void> {
  // No await between the last check and the set: two waiters cannot both take the turn.
  for (let held = open.get(path); held; held = open.get(path)) await held
  let release = () => {}
  open.set(path, new Promise<void>((resolve) => (release = resolve)))
  return () => {
    open.delete(path)
    release()
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
