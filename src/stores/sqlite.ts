/**
 * The embedded store: one SQLite file through `node:sqlite` (the only module that imports
 * it, since its API is still moving). Every method does synchronous work inside an async
 * function, so failures always arrive as rejections.
 *
 * The CLI and the server are different processes on the same file, so the database runs in
 * WAL mode (readers never block the writer) with a busy timeout (a writer waits for the
 * other process's write instead of failing at once).
 */
import type { SQLInputValue, StatementSync } from 'node:sqlite'
import { type Clock, systemClock } from '../core/ports.ts'
import * as shared from './rows.ts'
import { readChangesAfter } from './sql/change-log.ts'
import type { SqlDb } from './sql/db.ts'
import { SqlStore } from './sql/sql-store.ts'
import { toSqlite, turn } from './sql/sqlite-dialect.ts'
import { SqliteConnection } from './sqlite-connection.ts'
import { sqliteMigrations } from './sqlite-migrations.ts'
import type { Store, StoreTransaction } from './store.ts'

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

/** The SQLite `Store`. Create it with `openSqliteStore`. */
export class SqliteStore extends SqlStore implements Store {
  readonly kind = 'sqlite'
  readonly #path: string
  readonly #options: SqliteStoreOptions
  readonly #clock: Clock
  readonly #ping: StatementSync
  readonly #conn: SqliteConnection
  protected readonly db: SqlDb

  /** `view`: a transaction's view (`transaction()`), every statement part of it. */
  constructor(path: string, options: SqliteStoreOptions = {}, view = false) {
    super()
    this.#path = path
    this.#options = options
    this.#clock = options.clock ?? systemClock
    this.follow(
      {
        head: async () => {
          const db = this.#conn.open()
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
      options.externalChangePollMs ?? 500,
    )
    // Loaded here, not imported: Node 22 warns as it loads node:sqlite, and a static import
    // loads it with the module graph, before the thread's warning filter (sqlite-warning.ts) runs.
    const { DatabaseSync } = process.getBuiltinModule('node:sqlite')
    const db = new DatabaseSync(path, { enableForeignKeyConstraints: true })
    try {
      // busy_timeout first: switching to WAL itself needs a lock another process may hold.
      db.exec(`PRAGMA busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? 5000)}`)
      db.exec('PRAGMA journal_mode = WAL')
      db.exec('PRAGMA foreign_keys = ON')
      // FULL, not WAL's usual NORMAL: a revocation the CLI reported as done must survive a
      // power loss. Hot-path writes (last use, audit) are batched, so the fsync is rare.
      db.exec('PRAGMA synchronous = FULL')
      this.#ping = db.prepare('SELECT 1')
    } catch (error) {
      db.close()
      throw error
    }
    this.#conn = new SqliteConnection(db, path, {
      version: LATEST_VERSION,
      view,
      delivered: () => this.delivered(),
    })
    this.db = this.#conn.outside
  }

  async migrate(): Promise<number[]> {
    const db = this.#conn.open()
    const applied = await this.#conn.atomic(() =>
      shared.applyMigrations(
        {
          exec: async (script) => db.exec(script),
          all: async (sql, params = []) =>
            db.prepare(toSqlite(sql)).all(...(params as SQLInputValue[])),
        },
        sqliteMigrations,
        `CREATE TABLE IF NOT EXISTS schema_migrations (
          version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`,
        this.#clock.now(),
      ),
    )
    this.#conn.reset()
    return applied
  }

  async ping(): Promise<void> {
    this.#conn.open()
    this.#ping.get()
  }

  async close(): Promise<void> {
    if (this.#conn.closed) return
    this.listeners.clear()
    this.follower.close()
    this.#conn.close()
  }

  /**
   * The work runs on a connection of its own to the same file, in one `BEGIN IMMEDIATE`
   * transaction: calls on this object meanwhile (the server's write-behind) are not part of
   * it, and other writers wait for it (in this thread, for its turn; elsewhere, the busy
   * timeout). Called on a transaction's own view, the work is part of that transaction.
   */
  async transaction<T>(work: (tx: StoreTransaction) => Promise<T>): Promise<T> {
    if (this.#view) return this.#conn.nested(() => work(this))
    this.#conn.open()
    const release = await turn(this.#path)
    const tx = new SqliteStore(this.#path, { ...this.#options, externalChangePollMs: 0 }, true)
    let result: T
    try {
      result = await tx.#conn.nested(() => work(tx))
    } finally {
      release()
      await tx.close()
    }
    await this.delivered()
    return result
  }

  /** The database file (its directory holds the disk reserve, disk-reserve.ts). */
  get file(): string {
    return this.#path
  }

  get #view(): boolean {
    return this.#conn.view
  }

  protected get closed(): boolean {
    return this.#conn.closed
  }

  protected warn(obj: { err?: unknown }, message: string): void {
    process.emitWarning(obj.err === undefined ? message : `${message}: ${String(obj.err)}`)
  }
}
