import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { openStore, SQLITE_FILE_NAME } from '../../src/stores/open-store.ts'
import { sqliteMigrations } from '../../src/stores/sqlite-migrations.ts'

describe('openStore', () => {
  it('opens SQLite in a new data directory created with mode 0700, not migrated', async (t) => {
    const root = mkdtempSync(join(tmpdir(), 'tokengate-open-'))
    t.after(() => rmSync(root, { recursive: true, force: true }))
    const dataDir = join(root, 'nested', 'data')
    const store = await openStore({ dataDir })
    t.after(() => store.close())
    assert.equal(store.kind, 'sqlite')
    assert.equal(statSync(dataDir).mode & 0o777, 0o700)
    assert.ok(existsSync(join(dataDir, SQLITE_FILE_NAME)))
    await assert.rejects(store.listTenants(), /run migrate\(\)/)
    assert.deepEqual(
      await store.migrate(),
      sqliteMigrations.map((m) => m.version),
    )
    assert.deepEqual(await store.listTenants(), [])
  })

  it('refuses a database URL that is not Postgres, without echoing it', async () => {
    const url = 'mysql://admin:hunter2@db.example/tokengate'
    await assert.rejects(openStore({ databaseUrl: url }), (error: Error) => {
      assert.match(error.message, /postgres:\/\//)
      assert.doesNotMatch(error.message, /hunter2/)
      return true
    })
  })
})
