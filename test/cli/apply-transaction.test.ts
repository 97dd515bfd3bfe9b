/**
 * `apply` is all or nothing (issue #25): a store that fails or goes away in the middle of an
 * apply leaves nothing of it behind, neither the objects written before the failure nor
 * their audit events. The failure is injected into the real store by a trigger on the Nth
 * write: SQLite raises, Postgres raises or terminates the apply's own connection (the store
 * going away mid-way).
 */
import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, it } from 'node:test'
import pg from 'pg'
import { openStore } from '../../src/stores/open-store.ts'
import type { Store } from '../../src/stores/store.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { cli, tempDataDir, withDataStore } from './helpers.ts'

/** Three tenants, the third disabled (a fourth write), then an issuer bound to the first. */
const FILE = `
tenants:
  - id: t1
  - id: t2
  - id: t3
    enabled: false
issuers:
  - issuer: https://idp.example/
    audience: api
    pem-file: issuer.pem
    algorithm: ES256
    tenant: t1
`

function writeApplyFile(dir: string): string {
  const pem = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    .publicKey.export({ type: 'spki', format: 'pem' })
    .toString()
  writeFileSync(join(dir, 'issuer.pem'), pem)
  const file = join(dir, 'tokengate.yaml')
  writeFileSync(file, FILE)
  return file
}

/** Everything apply could have left: tenants, issuers, audit events. */
async function leftovers(store: Store) {
  const tenants = (await store.listTenants()).map((t) => t.id)
  const issuers = (await store.listIssuers()).map((i) => i.issuer)
  let events = 0
  for (const id of ['t1', 't2', 't3']) {
    events += (await store.listAudit(id, { limit: 50 })).items.length
  }
  return { tenants, issuers, events }
}

const NOTHING = { tenants: [], issuers: [], events: 0 }

describe('apply is one transaction: SQLite', () => {
  const data = tempDataDir()
  after(() => data.cleanup())
  const dataDir = join(data.dir, 'store')
  const file = writeApplyFile(data.dir)
  const withStore = <T>(use: (store: Store) => Promise<T>) => withDataStore(dataDir, use)

  it('a write failing after three others leaves no tenant, issuer or audit event', async () => {
    await withStore(async () => {})
    const db = new DatabaseSync(join(dataDir, 'tokengate.db'))
    // The fourth write (t3 disabled) fails, after three tenant inserts and their events.
    db.exec(`CREATE TRIGGER inject_failure BEFORE UPDATE OF enabled ON tenants
      WHEN NEW.id = 't3' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
    db.close()
    const failed = await cli(['apply', '-f', file], { dataDir })
    assert.equal(failed.code, 1, failed.stdout)
    assert.match(failed.stderr, /injected failure/)
    assert.deepEqual(await withStore(leftovers), NOTHING)
  })

  it('the same file applies whole once the store takes every write', async () => {
    const db = new DatabaseSync(join(dataDir, 'tokengate.db'))
    db.exec('DROP TRIGGER inject_failure')
    db.close()
    const applied = await cli(['apply', '-f', file], { dataDir })
    assert.equal(applied.code, 0, applied.stderr)
    assert.match(applied.stdout, /Applied 5 changes\./)
    const left = await withStore(leftovers)
    assert.deepEqual(left.tenants, ['t1', 't2', 't3'])
    assert.deepEqual(left.issuers, ['https://idp.example/'])
    // tenant.created ×3, tenant.disabled, issuer.added.
    assert.equal(left.events, 5)
  })
})

describe('apply is one transaction: Postgres', { skip: skipReason('postgres') }, () => {
  let server: PostgresServer
  const data = tempDataDir()
  const file = writeApplyFile(data.dir)
  before(async () => {
    server = await startPostgres()
  })
  after(async () => {
    await server?.stop()
    data.cleanup()
  })

  /** A fresh migrated database with `sql` run in it (the injected failure). */
  async function database(sql: string): Promise<string> {
    const url = await server.createDatabase()
    const store = await openStore({ databaseUrl: url })
    await store.migrate()
    await store.close()
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    await client.query(sql)
    await client.end()
    return url
  }

  const withStore = async <T>(url: string, use: (store: Store) => Promise<T>) => {
    const store = await openStore({ databaseUrl: url })
    try {
      return await use(store)
    } finally {
      await store.close()
    }
  }

  it('a write raising after three others leaves nothing', async () => {
    const url = await database(`
      CREATE FUNCTION inject_failure() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'injected failure'; END $$;
      CREATE TRIGGER inject_failure BEFORE UPDATE OF enabled ON tenants
      FOR EACH ROW WHEN (NEW.id = 't3') EXECUTE FUNCTION inject_failure();`)
    const failed = await cli(['apply', '-f', file, '--database-url', url])
    assert.equal(failed.code, 1, failed.stdout)
    assert.deepEqual(await withStore(url, leftovers), NOTHING)
  })

  it('the store going away mid-apply (its connection terminated) leaves nothing', async () => {
    const url = await database(`
      CREATE FUNCTION go_away() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$;
      CREATE TRIGGER go_away BEFORE UPDATE OF enabled ON tenants
      FOR EACH ROW WHEN (NEW.id = 't3') EXECUTE FUNCTION go_away();`)
    const failed = await cli(['apply', '-f', file, '--database-url', url])
    assert.equal(failed.code, 1, failed.stdout)
    assert.deepEqual(await withStore(url, leftovers), NOTHING)
    // Nothing half-done blocks the next apply: without the trigger it applies whole.
    await withStore(url, async () => {
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      await client.query('DROP TRIGGER go_away ON tenants')
      await client.end()
    })
    const applied = await cli(['apply', '-f', file, '--database-url', url])
    assert.equal(applied.code, 0, applied.stderr)
    const left = await withStore(url, leftovers)
    assert.deepEqual(left.tenants, ['t1', 't2', 't3'])
    assert.equal(left.events, 5)
  })
})
