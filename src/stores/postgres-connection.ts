/**
 * The Postgres pool as the shared SQL's `SqlDb` (sql/db.ts): statements sent as plain
 * parameterized queries (no named prepared statements, so PgBouncer in transaction pooling
 * works), transactions on one pooled client, constraint errors translated
 * (sql/postgres-dialect.ts). postgres.ts owns the store around it.
 */
import pg from 'pg'
import { batchParam, type SqlDb } from './sql/db.ts'
import { postgresDialect, translate } from './sql/postgres-dialect.ts'

/** What the store adds to a SqlDb: whether it is open, and how a change is made. */
export interface PostgresHooks {
  /** Throws once the store (or the transaction a view belongs to) has ended. */
  checkOpen(): void
  /** A change other instances cache, outside any transaction (postgres.ts). */
  change<T>(work: (db: SqlDb) => Promise<T>): Promise<T>
}

export class PostgresConnection {
  readonly #pool: pg.Pool

  constructor(url: string, poolSize: number, warn: (obj: object, message: string) => void) {
    this.#pool = new pg.Pool({
      connectionString: url,
      max: poolSize,
      connectionTimeoutMillis: 5000,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      application_name: 'tokengate',
    })
    // An idle pooled connection that breaks (server restart) is discarded by the pool; the
    // event must be handled or it would crash the process. The next query reconnects.
    this.#pool.on('error', (error) => warn({ err: error }, 'idle postgres connection lost'))
  }

  /**
   * Runs `work` on one client in a transaction that first runs `lock` (held until the end;
   * none when empty); rolls back on any error. A client that failed mid-transaction is
   * destroyed, not reused.
   */
  async transaction<T>(
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

  /** A SqlDb over `client` (a transaction's: every statement joins it) or the pool. */
  sqlDb(client: pg.PoolClient | undefined, hooks: PostgresHooks): SqlDb {
    const query = async (sql: string, params: readonly unknown[] = []) => {
      hooks.checkOpen()
      try {
        return await (client ?? this.#pool).query(sql, [...params])
      } catch (error) {
        throw translate(error)
      }
    }
    const db: SqlDb = {
      dialect: postgresDialect,
      checkOpen: () => hooks.checkOpen(),
      all: async <R extends object>(sql: string, params?: readonly unknown[]) =>
        (await query(sql, params)).rows as R[],
      run: async (sql, params) => (await query(sql, params)).rowCount ?? 0,
      insertRows: async <R extends object>(
        into: string,
        columns: readonly { name: string; type: string }[],
        rows: readonly (readonly unknown[])[],
        tail: string,
      ) => {
        const types = columns.map((column) => column.type)
        const select = types.map((_type, i) => `b.c${i}`).join(', ')
        const sql = `INSERT INTO ${into} (${columns.map((c) => c.name).join(', ')})
          SELECT ${select} FROM ${postgresDialect.batch('$1', types)} WHERE true ORDER BY b.n ${tail}`
        return (await query(sql, [batchParam(rows)])).rows as R[]
      },
      atomic: (work) =>
        client ? work(db) : this.transaction('', [], (c) => work(this.sqlDb(c, hooks))),
      change: (work) => (client ? work(db) : hooks.change(work)),
    }
    return db
  }

  end(): Promise<void> {
    return this.#pool.end()
  }
}
