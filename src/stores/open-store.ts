/**
 * Chooses and opens the configured store: the embedded SQLite file in the data directory,
 * or Postgres when a database URL is given. Like the stores themselves it does NOT migrate:
 * callers (`tokengate migrate`, server start-up) call `store.migrate()` explicitly.
 */
import { chmod, mkdir, open, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { readSecretKeyFile, type SecretBox, sealIssuerSecrets } from './secret-box.ts'
import type { Store } from './store.ts'

export type OpenStoreOptions = (
  | { readonly dataDir: string }
  | { readonly databaseUrl: string; readonly databaseListenUrl?: string | undefined }
) & {
  /** Interval of the change-log poll, in ms (default 500; see change-log.ts). */
  readonly changePollMs?: number | undefined
  /**
   * SQLite: run the write-behind writes (audit, last-used, usage, quota, retention) on a
   * worker thread (sqlite-writer.ts), so no request waits on a disk. For servers and library
   * apps; a CLI command writes once and needs no thread.
   */
  readonly offloadWrites?: boolean | undefined
  /** Receives the Postgres pool's and change feed's warnings (lost connection, reconnects). */
  readonly logger?: { warn(obj: object, msg: string): void } | undefined
  /**
   * The key issuer secrets are sealed with (32 bytes, base64 or hex). Default: for the
   * embedded store `<dataDir>/secret.key`, generated when missing; for Postgres none, and
   * then an issuer with a shared secret cannot be stored.
   */
  readonly secretKeyFile?: string | undefined
}

/** File name of the generated secret key inside the data directory (embedded store only). */
export const SECRET_KEY_FILE_NAME = 'secret.key'

/** File name of the SQLite database inside the data directory. */
export const SQLITE_FILE_NAME = 'tokengate.db'

/**
 * @example
 *   const store = await openStore({ dataDir: config.dataDir })
 *   await store.migrate()
 */
export async function openStore(options: OpenStoreOptions): Promise<Store> {
  if ('databaseUrl' in options) {
    const box = options.secretKeyFile ? readSecretKeyFile(options.secretKeyFile) : undefined
    return sealIssuerSecrets(await openPostgres(options, options.logger), box)
  }
  await ensurePrivateDirectory(options.dataDir)
  const path = join(options.dataDir, SQLITE_FILE_NAME)
  await ensurePrivateFiles([path, `${path}-wal`, `${path}-shm`])
  const box: SecretBox = options.secretKeyFile
    ? readSecretKeyFile(options.secretKeyFile)
    : readSecretKeyFile(join(options.dataDir, SECRET_KEY_FILE_NAME), true)
  // Loaded on demand, like Postgres: importing the package must not need node:sqlite, so
  // that an old Node reaches the version check (src/node-version.ts) instead of a link error.
  const settings = { externalChangePollMs: options.changePollMs }
  const store = options.offloadWrites
    ? (await import('./sqlite-writer.ts')).openSqliteWithWriter(path, settings)
    : (await import('./sqlite.ts')).openSqliteStore(path, settings)
  return sealIssuerSecrets(store, box)
}

/**
 * The data directory holds the token hashes, the audit trail, the TLS private key and the
 * secret key: 0700. An existing directory open to group or others is tightened rather than
 * refused: it is tokengate's own directory, nothing else belongs in it, and a start that
 * refuses would leave the files exposed until someone acts (OpenSSH refuses instead, for
 * files it does not own; here we do own them).
 */
async function ensurePrivateDirectory(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 })
  if (((await stat(dir)).mode & 0o077) !== 0) await chmod(dir, 0o700)
}

/**
 * Database files 0600. The database is created here first, with that mode, because SQLite
 * creates it with the process umask (usually 0644) and gives its -wal and -shm files the
 * database file's mode; files from earlier versions are tightened.
 */
async function ensurePrivateFiles(paths: readonly string[]): Promise<void> {
  const [database] = paths
  if (database !== undefined) await (await open(database, 'a', 0o600)).close()
  for (const path of paths) {
    try {
      if (((await stat(path)).mode & 0o077) !== 0) await chmod(path, 0o600)
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    }
  }
}

async function openPostgres(
  options: { databaseUrl: string; databaseListenUrl?: string | undefined; changePollMs?: number },
  logger: OpenStoreOptions['logger'],
): Promise<Store> {
  const url = options.databaseUrl
  if (!/^postgres(ql)?:\/\//.test(url)) {
    // Never echo the URL: it usually carries a password.
    throw new Error('databaseUrl must start with postgres:// or postgresql://')
  }
  // Loaded on demand, so that SQLite deployments never load the pg driver.
  const { openPostgresStore } = await import('./postgres.ts')
  return openPostgresStore(url, {
    logger,
    listenUrl: options.databaseListenUrl,
    changePollMs: options.changePollMs,
  })
}
