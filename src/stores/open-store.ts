/**
 * Chooses and opens the configured store: the embedded SQLite file in the data directory,
 * or Postgres when a database URL is given. Like the stores themselves it does NOT migrate:
 * callers (`tokengate migrate`, server start-up) call `store.migrate()` explicitly.
 */
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { openSqliteStore } from './sqlite.ts'
import type { Store } from './store.ts'

export type OpenStoreOptions = ({ readonly dataDir: string } | { readonly databaseUrl: string }) & {
  /** Receives the Postgres pool's and change feed's warnings (lost connection, reconnects). */
  readonly logger?: { warn(obj: object, msg: string): void } | undefined
}

/** File name of the SQLite database inside the data directory. */
export const SQLITE_FILE_NAME = 'tokengate.db'

/**
 * @example
 *   const store = await openStore({ dataDir: config.dataDir })
 *   await store.migrate()
 */
export async function openStore(options: OpenStoreOptions): Promise<Store> {
  if ('databaseUrl' in options) return openPostgres(options.databaseUrl, options.logger)
  // 0700: the directory holds the token hashes, the audit trail and the TLS private key.
  // An existing directory keeps the mode the operator gave it.
  await mkdir(options.dataDir, { recursive: true, mode: 0o700 })
  return openSqliteStore(join(options.dataDir, SQLITE_FILE_NAME))
}

async function openPostgres(url: string, logger: OpenStoreOptions['logger']): Promise<Store> {
  if (!/^postgres(ql)?:\/\//.test(url)) {
    // Never echo the URL: it usually carries a password.
    throw new Error('databaseUrl must start with postgres:// or postgresql://')
  }
  // Loaded on demand, so that SQLite deployments never load the pg driver.
  const { openPostgresStore } = await import('./postgres.ts')
  return openPostgresStore(url, { logger })
}
