/**
 * One `node:sqlite` connection as the shared SQL's `SqlDb` (sql/db.ts): statements rewritten
 * for SQLite and prepared once, transactions (`BEGIN IMMEDIATE`, savepoints inside one), and
 * the turns a database file's transactions take in this thread (sql/sqlite-dialect.ts).
 * sqlite.ts opens the connection and hands it here.
 */
import type { DatabaseSync, SQLInputValue, StatementSync } from 'node:sqlite'
import type { SqlDb } from './sql/db.ts'
import {
  checked,
  sqliteDialect,
  toSqlite,
  turn,
  WRITES,
  waitTurn,
  whileOpen,
} from './sql/sqlite-dialect.ts'

/**
 * Rows per statement of `insertRows`, largest first: a batch is written as multi-row
 * `VALUES` statements of these sizes (one SQLite call per chunk instead of one per row), and
 * a file prepares at most this many texts per table.
 */
const CHUNKS = [64, 16, 4, 1] as const

interface Prepared {
  readonly statement: StatementSync
  readonly writes: boolean
}

export interface SqliteConnectionOptions {
  /** Statements are refused until the schema is at this version (checked once). */
  readonly version: number
  /** A transaction's view (`transaction()`): every statement is part of that transaction. */
  readonly view: boolean
  /** Delivers what was just written to the store's watchers. */
  readonly delivered: () => Promise<void>
}

export class SqliteConnection {
  readonly #db: DatabaseSync
  readonly #path: string
  readonly #options: SqliteConnectionOptions
  /** Statements of the shared SQL, by their Postgres text, prepared once. */
  readonly #cache = new Map<string, Prepared>()
  /** insertRows' statement texts, by table, columns, rows per statement and tail. */
  readonly #inserts = new Map<string, string>()
  #current = false
  #closed = false
  /** What statements outside a transaction run on. */
  readonly outside: SqlDb = this.#sqlDb(false)
  /** What a transaction's work runs its statements on. */
  readonly #inside: SqlDb = this.#sqlDb(true)

  constructor(db: DatabaseSync, path: string, options: SqliteConnectionOptions) {
    this.#db = db
    this.#path = path
    this.#options = options
  }

  get closed(): boolean {
    return this.#closed
  }

  /** Whether this is a transaction's view. */
  get view(): boolean {
    return this.#options.view
  }

  /** The connection itself; throws once closed. */
  open(): DatabaseSync {
    if (this.#closed) throw new Error('sqlite store is closed')
    return this.#db
  }

  /** Forgets prepared statements and the schema check (after a migration). */
  reset(): void {
    this.#current = false
    this.#cache.clear()
  }

  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.reset()
    this.#db.close()
  }

  /**
   * `work` in one transaction of this connection (a savepoint inside a view's), in this
   * file's turn: other statements outside it wait when they would join it or write.
   */
  async atomic<T>(work: (db: SqlDb) => Promise<T>): Promise<T> {
    if (this.#options.view) return this.nested(work)
    const release = await turn(this.#path)
    try {
      return await this.nested(work)
    } finally {
      release()
    }
  }

  /** `work` in a transaction, or a savepoint of the one open. */
  async nested<T>(work: (db: SqlDb) => Promise<T>): Promise<T> {
    const db = this.open()
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

  /**
   * `inside`: the view a transaction's work gets. Outside it, a statement waits for the
   * transaction open on this file in this thread when it would join it (this connection) or
   * write (another connection: it would block the thread on the file's write lock); reads of
   * other connections go on (WAL).
   */
  #sqlDb(inside: boolean): SqlDb {
    /** Runs `use` on the prepared statement, at once unless it must wait for the turn. */
    const run = <T>(sql: string, use: (statement: StatementSync) => T): Promise<T> => {
      try {
        const prepared = this.#statement(sql)
        const execute = () => checked(() => use(prepared.statement))
        if (!inside && !this.#options.view && whileOpen(this.#path)) {
          if (prepared.writes || this.#db.isTransaction) {
            return waitTurn(this.#path).then(execute)
          }
        }
        return Promise.resolve(execute())
      } catch (error) {
        return Promise.reject(error)
      }
    }
    const db: SqlDb = {
      dialect: sqliteDialect,
      checkOpen: () => void this.open(),
      all: <R extends object>(sql: string, params: readonly unknown[] = []) =>
        run(sql, (s) => s.all(...(params as SQLInputValue[])) as R[]),
      run: (sql, params = []) =>
        run(sql, (s) => Number(s.run(...(params as SQLInputValue[])).changes)),
      insertRows: <R extends object>(
        into: string,
        columns: readonly { name: string; type: string }[],
        rows: readonly (readonly unknown[])[],
        tail: string,
      ) => {
        const json = columns.map((column) => column.type === 'jsonb')
        const returning = /\bRETURNING\b/i.test(tail)
        // One transaction, its statements run synchronously (no await between chunks).
        return db.atomic(async () => {
          const returned: R[] = []
          let at = 0
          for (const size of CHUNKS) {
            if (rows.length - at < size) continue
            const { statement } = this.#statement(this.#insertText(into, columns, size, tail))
            for (; rows.length - at >= size; at += size) {
              const values: unknown[] = []
              for (let r = at; r < at + size; r++) {
                const row = rows[r] as readonly unknown[]
                for (let i = 0; i < row.length; i++) {
                  const v = row[i]
                  values.push(json[i] && v !== null ? JSON.stringify(v) : v)
                }
              }
              const flat = values as SQLInputValue[]
              if (returning) returned.push(...(checked(() => statement.all(...flat)) as R[]))
              else checked(() => statement.run(...flat))
            }
          }
          return returned
        })
      },
      atomic: (work) => (inside ? this.nested(work) : this.atomic(work)),
      change: async (work) => {
        const result = await db.atomic(work)
        if (!inside) await this.#options.delivered()
        return result
      },
    }
    return db
  }

  /** `INSERT INTO into (columns) VALUES (…), … tail` with `rows` rows, its text made once. */
  #insertText(
    into: string,
    columns: readonly { name: string; type: string }[],
    rows: number,
    tail: string,
  ): string {
    const names = columns.map((c) => c.name).join(', ')
    const key = `${into} (${names}) ${rows} ${tail}`
    let text = this.#inserts.get(key)
    if (text === undefined) {
      // Anonymous `?`s: node:sqlite binds numbered ones (`?N`, what `$N` becomes) ever
      // slower as their count grows (64 rows of 9: 1.65x the CPU of a row at a time).
      const tuple = `(${columns.map(() => '?').join(', ')})`
      text = `INSERT INTO ${into} (${names}) VALUES ${Array(rows).fill(tuple).join(', ')} ${tail}`
      this.#inserts.set(key, text)
    }
    return text
  }

  /** The statement for `sql` (written for Postgres, sql/db.ts), rewritten and prepared once. */
  #statement(sql: string): Prepared {
    this.#checkSchema()
    let prepared = this.#cache.get(sql)
    if (!prepared) {
      const text = toSqlite(sql)
      prepared = { statement: this.open().prepare(text), writes: WRITES.test(text) }
      this.#cache.set(sql, prepared)
    }
    return prepared
  }

  #checkSchema(): void {
    const db = this.open()
    if (this.#current) return
    const hasTable = db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
      .get()
    const version = hasTable
      ? ((db.prepare('SELECT max(version) AS v FROM schema_migrations').get()?.v as
          | number
          | null) ?? 0)
      : 0
    if (version !== this.#options.version) {
      throw new Error(
        `sqlite schema is at version ${version}, this tokengate needs ${this.#options.version}: run migrate()`,
      )
    }
    this.#current = true
  }
}
