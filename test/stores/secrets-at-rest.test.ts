import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { chmodSync, mkdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, it } from 'node:test'
import pg from 'pg'
import type { IssuerConfig } from '../../src/core/issuer.ts'
import { openStore, SQLITE_FILE_NAME } from '../../src/stores/open-store.ts'
import { unreadableReason } from '../../src/stores/secret-box.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { startTestServer } from '../helpers/server.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'

/**
 * Secrets at rest (#11 item 6): a local user who can read the data directory or a database
 * dump must not find an HS256 issuer secret (with it they mint any token), and the data
 * directory and database files are private to the service's user.
 */
const SECRET = randomBytes(32).toString('base64url')
const hsIssuer = (issuer: string): IssuerConfig => ({
  issuer,
  audiences: ['tokengate'],
  keySource: { kind: 'secret', secret: SECRET, algorithm: 'HS256' },
})
const mode = (path: string) => statSync(path).mode & 0o777
const secretBytes = [SECRET, Buffer.from(SECRET, 'base64url').toString('hex')]

describe('secrets at rest: file modes (#11 item 6)', () => {
  it('a new data directory is 0700, the database files 0600, the dev TLS key 0600', async () => {
    const server = await startTestServer()
    try {
      // A write, so the WAL and its index exist.
      assert.equal((await server.cli('tenant', 'create', 'modes')).code, 0)
      assert.equal(mode(server.dataDir), 0o700)
      const db = join(server.dataDir, SQLITE_FILE_NAME)
      for (const file of [db, `${db}-wal`, `${db}-shm`]) assert.equal(mode(file), 0o600, file)
      assert.equal(mode(join(server.dataDir, 'tls', 'dev-key.pem')), 0o600)
      assert.equal(mode(join(server.dataDir, 'secret.key')), 0o600)
    } finally {
      await server.close()
    }
  })

  it('a pre-existing 0755 directory with 0644 files is tightened at start', async () => {
    const dir = tempDir('tg-modes-')
    chmodSync(dir, 0o755)
    const db = join(dir, SQLITE_FILE_NAME)
    const legacy = openSqliteStore(db)
    await legacy.migrate()
    await legacy.close()
    chmodSync(db, 0o644)
    mkdirSync(join(dir, 'tls'), { recursive: true })
    const first = await startTestServer({ dataDir: dir })
    await first.close()
    chmodSync(join(dir, 'tls', 'dev-key.pem'), 0o644)
    chmodSync(dir, 0o755)
    const server = await startTestServer({ dataDir: dir })
    try {
      assert.equal(mode(dir), 0o700)
      assert.equal(mode(db), 0o600)
      assert.equal(mode(join(dir, 'tls', 'dev-key.pem')), 0o600)
    } finally {
      await server.close()
    }
  })
})

describe('secrets at rest: no plaintext issuer secret in SQLite (#11 item 6)', () => {
  it('an issuer secret is stored sealed (raw SQL shows no secret bytes) and reads back', async () => {
    const dir = tempDir('tg-secret-')
    const store = await openStore({ dataDir: dir })
    await store.migrate()
    await store.putIssuer(hsIssuer('https://hs.test'), Date.now())
    assert.equal((await store.listIssuers())[0]?.keySource.kind, 'secret')
    assert.deepEqual((await store.listIssuers())[0]?.keySource, hsIssuer('').keySource)
    await store.close()
    const raw = new DatabaseSync(join(dir, SQLITE_FILE_NAME), { readOnly: true })
    const rows = JSON.stringify(raw.prepare('SELECT * FROM issuers').all())
    raw.close()
    for (const bytes of secretBytes) assert.ok(!rows.includes(bytes), rows)
    assert.match(rows, /sealedSecret/)
  })

  it('migrate seals a plaintext secret written by an earlier version', async () => {
    const dir = tempDir('tg-secret-legacy-')
    mkdirSync(dir, { recursive: true })
    const legacy = openSqliteStore(join(dir, SQLITE_FILE_NAME))
    await legacy.migrate()
    await legacy.putIssuer(hsIssuer('https://legacy.test'), Date.now())
    await legacy.close()
    const store = await openStore({ dataDir: dir })
    await store.migrate()
    assert.deepEqual((await store.listIssuers())[0]?.keySource, hsIssuer('').keySource)
    await store.close()
    const raw = new DatabaseSync(join(dir, SQLITE_FILE_NAME), { readOnly: true })
    const rows = JSON.stringify(raw.prepare('SELECT * FROM issuers').all())
    raw.close()
    for (const bytes of secretBytes) assert.ok(!rows.includes(bytes), rows)
  })

  it('a sealed secret does not open under another key: the issuer is listed unreadable, naming the key', async () => {
    const dir = tempDir('tg-secret-wrong-')
    const store = await openStore({ dataDir: dir })
    await store.migrate()
    await store.putIssuer(hsIssuer('https://hs.test'), Date.now())
    await store.close()
    const other = join(tempDir('tg-key-'), 'other.key')
    writeFileSync(other, randomBytes(32).toString('base64'), { mode: 0o600 })
    const reopened = await openStore({ dataDir: dir, secretKeyFile: other })
    // Nothing that needs no secret fails for it (issue 32): migrate, and listing.
    await reopened.migrate()
    const [listed] = await reopened.listIssuers()
    assert.match(unreadableReason(listed as IssuerConfig) ?? '', /configured secret key is/)
    assert.deepEqual(listed?.keySource, { kind: 'secret', algorithm: 'HS256', secret: '' })
    await reopened.close()
  })
})

const skip = skipReason('postgres')
describe('secrets at rest: no plaintext issuer secret in Postgres (#11 item 6)', { skip }, () => {
  let server: PostgresServer
  const keyFile = join(tempDir('tg-pg-key-'), 'secret.key')
  before(async () => {
    server = await startPostgres()
    writeFileSync(keyFile, randomBytes(32).toString('hex'), { mode: 0o600 })
  })
  after(() => server?.stop())

  async function rawIssuers(url: string): Promise<string> {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      return JSON.stringify((await client.query('SELECT * FROM issuers')).rows)
    } finally {
      await client.end()
    }
  }

  it('a secret is sealed with the configured key and reads back', async () => {
    const url = await server.createDatabase()
    const store = await openStore({ databaseUrl: url, secretKeyFile: keyFile })
    await store.migrate()
    await store.putIssuer(hsIssuer('https://hs.test'), Date.now())
    assert.deepEqual((await store.listIssuers())[0]?.keySource, hsIssuer('').keySource)
    await store.close()
    const rows = await rawIssuers(url)
    for (const bytes of secretBytes) assert.ok(!rows.includes(bytes), rows)
  })

  it('migrate seals legacy plaintext; without the key, the issuer is listed unreadable with the fix and no secret can be written', async () => {
    const url = await server.createDatabase()
    const { openPostgresStore } = await import('../../src/stores/postgres.ts')
    const legacy = await openPostgresStore(url)
    await legacy.migrate()
    await legacy.putIssuer(hsIssuer('https://legacy.test'), Date.now())
    await legacy.close()
    const store = await openStore({ databaseUrl: url, secretKeyFile: keyFile })
    await store.migrate()
    await store.close()
    const rows = await rawIssuers(url)
    for (const bytes of secretBytes) assert.ok(!rows.includes(bytes), rows)
    const keyless = await openStore({ databaseUrl: url })
    await keyless.migrate()
    const [listed] = await keyless.listIssuers()
    assert.match(unreadableReason(listed as IssuerConfig) ?? '', /set secretKeyFile/)
    await assert.rejects(
      keyless.putIssuer(hsIssuer('https://new.test'), Date.now()),
      /set secretKeyFile/,
    )
    await keyless.close()
  })
})
