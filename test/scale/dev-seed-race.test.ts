import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import pg from 'pg'
import { seedDevData } from '../../src/dev/seed.ts'
import { openPostgresStore } from '../../src/stores/postgres.ts'
import { runTokengate } from '../helpers/launch.ts'
import { spawnServe } from '../helpers/serve-process.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'

/** `tokengate serve --dev` on `databaseUrl`: its URL, or why it did not start. */
function serveDev(databaseUrl: string, dataDir: string) {
  const started = spawnServe({
    env: { DATABASE_URL: databaseUrl, TOKENGATE_DATA_DIR: dataDir, TOKENGATE_LOG_LEVEL: 'warn' },
  }).then(
    (served) => ({ ok: true as const, url: served.url, stop: served.stop }),
    (error: Error) => ({ ok: false as const, why: error.message, stop: async () => {} }),
  )
  return { started, stop: async () => (await started).stop() }
}

/**
 * Several `serve --dev` instances started together on a fresh Postgres all race to seed the
 * demo tenant (issue #25: one died on "tenants_pkey" 1 start in 3). Every one must come up.
 */
describe('serve --dev instances started together on a fresh Postgres', {
  skip: skipReason('postgres'),
}, () => {
  let server: PostgresServer
  const dirs: string[] = []
  before(async () => {
    server = await startPostgres()
  })
  after(async () => {
    await server?.stop()
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  })

  it('seeding from 4 instances at the same moment: every one succeeds, one demo tenant', async () => {
    // The processes below rarely collide exactly (the migration lock spaces them out); this
    // lines up the seeding itself, as it happened in one start of three.
    const url = await server.createDatabase()
    const stores = await Promise.all(
      [1, 2, 3, 4].map(() => openPostgresStore(url, { listen: false })),
    )
    try {
      await stores[0]?.migrate()
      const seeds = await Promise.all(
        stores.map((store) => {
          const dir = mkdtempSync(join(tmpdir(), 'tg-dev-race-'))
          dirs.push(dir)
          return seedDevData(store, dir, Date.now())
        }),
      )
      assert.equal(seeds.filter((seed) => seed.demoPat !== undefined).length, 1)
      assert.equal((await stores[0]?.listTenants())?.length, 1)
    } finally {
      for (const store of stores) await store.close()
    }
  })

  it('3 rounds of 3 instances at once: none dies, one demo tenant', async (t) => {
    for (let round = 1; round <= 3; round++) {
      const url = await server.createDatabase()
      const instances = [1, 2, 3].map(() => {
        const dir = mkdtempSync(join(tmpdir(), 'tg-dev-race-'))
        dirs.push(dir)
        return serveDev(url, dir)
      })
      try {
        const results = await Promise.all(instances.map((i) => i.started))
        for (const result of results) assert.ok(result.ok, result.ok ? '' : result.why)
        for (const result of results) {
          const health = await fetch(`${result.ok ? result.url : ''}/healthz`)
          assert.equal(health.status, 200)
        }
      } finally {
        await Promise.all(instances.map((i) => i.stop()))
      }
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      const { rows } = await client.query(
        "SELECT count(*)::int AS n FROM tenants WHERE id = 'demo'",
      )
      await client.end()
      assert.equal(rows[0]?.n, 1)
      t.diagnostic(`round ${round}: 3 instances up`)
    }
  })
})

/**
 * 20 `serve --dev` started at once on one fresh SQLite data directory (issue #32: the second
 * sometimes died with `EEXIST dev-issuer-key.json`, 2 trials of 13). Each dev file (issuer
 * key, certificate and its key) is created whole or not at all, and a loser uses the
 * winner's: every instance comes up (or exits with a message naming what it could not do),
 * and all of them serve the one certificate on disk and accept the one dev issuer's tokens.
 */
describe('serve --dev instances started together on one fresh SQLite data directory', () => {
  it('20 at once: every one serves the same certificate and dev issuer', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-dev-race-sqlite-'))
    const dataDir = join(dir, 'data')
    const starts = Array.from({ length: 20 }, () =>
      spawnServe({
        env: { TOKENGATE_DATA_DIR: dataDir, TOKENGATE_LOG_LEVEL: 'warn' },
        args: ['--dev', '--listen', '127.0.0.1:0'],
      }).then(
        (served) => ({ ok: true as const, served }),
        (error: Error) => ({ ok: false as const, why: error.message }),
      ),
    )
    const results = await Promise.all(starts)
    try {
      const failed = results.flatMap((r) => (r.ok ? [] : [r.why]))
      // A failure must say what it could not do; never a bare EEXIST of a dev file.
      for (const why of failed) assert.doesNotMatch(why, /EEXIST|Unexpected end of JSON/, why)
      assert.deepEqual(failed, [], failed.join('\n---\n'))
      const ca = readFileSync(join(dataDir, 'tls', 'dev-cert.pem'), 'utf8')
      const minted = await runTokengate(
        ['jwt', 'mint', '--dev', '--tenant', 'demo', '--subject', 'race', '--data-dir', dataDir],
        { cwd: dir },
      )
      assert.equal(minted.code, 0, minted.stderr)
      const jwt = minted.stdout.trim()
      for (const result of results) {
        if (!result.ok) continue
        const status = await httpsStatus(`${result.served.url}/api/v1/me`, ca, {
          authorization: `Bearer ${jwt}`,
          'x-tenant-id': 'demo',
        })
        assert.equal(status, 200, result.served.url)
      }
    } finally {
      await Promise.all(results.map((r) => (r.ok ? r.served.stop() : undefined)))
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

/** The status of a GET verified against `ca` (the dev certificate on disk), or 0. */
function httpsStatus(url: string, ca: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve) => {
    const req = https.get(url, { ca, headers }, (res) => {
      res.resume()
      resolve(res.statusCode ?? 0)
    })
    req.on('error', () => resolve(0))
  })
}
