import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { describe, it } from 'node:test'
import pino from 'pino'
import { createAuthContext } from '../../src/auth/auth-context.ts'
import { loadConfig } from '../../src/config/load.ts'
import { systemClock } from '../../src/core/ports.ts'
import { mintDevJwt } from '../../src/dev/issuer.ts'
import { seedDevData } from '../../src/dev/seed.ts'
import { buildServer } from '../../src/server/server.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { startTestServer } from '../helpers/server.ts'
import { tempDir } from '../helpers/temp-dir.ts'

function freshConfig() {
  const dataDir = tempDir('tg-life-')
  return loadConfig({ env: {}, overrides: { dev: true, dataDir, server: { plainHttp: true } } })
}

describe('server lifecycle and failure modes', () => {
  it('store down: PAT → 503 unavailable with Retry-After (never a pass, never 401); /readyz → 503', async (t) => {
    const config = freshConfig()
    const store = openSqliteStore(join(config.dataDir, 'tokengate.db'))
    await store.migrate()
    const seed = await seedDevData(store, config.dataDir, Date.now())
    const auth = await createAuthContext(config, store, systemClock, pino({ level: 'silent' }))
    const app = await buildServer({ config, auth, logger: pino({ level: 'silent' }) })
    t.after(() => app.close())
    const pat = seed.demoPat as string
    const jwt = await mintDevJwt(config.dataDir, {
      tenantId: 'demo',
      subject: 'a',
      permissions: [],
    })

    const ok = await app.inject({ url: '/api/v1/me', headers: { authorization: `Bearer ${pat}` } })
    assert.equal(ok.statusCode, 200)

    await store.close()
    auth.lookups.clear()
    const down = await app.inject({
      url: '/api/v1/me',
      headers: { authorization: `Bearer ${pat}` },
    })
    assert.equal(down.statusCode, 503)
    assert.equal(down.json().code, 'unavailable')
    assert.ok(Number(down.headers['retry-after']) > 0)
    assert.equal(down.headers['www-authenticate'], undefined)

    // A JWT needs the store for its tenant check; with nothing cached it fails closed too.
    const jwtDown = await app.inject({
      url: '/api/v1/me',
      headers: { authorization: `Bearer ${jwt}`, 'x-tenant-id': 'demo' },
    })
    assert.equal(jwtDown.statusCode, 503)

    const listing = await app.inject({
      url: '/api/v1/tokens',
      headers: { authorization: `Bearer ${pat}` },
    })
    assert.equal(
      listing.statusCode,
      503,
      'a cached caller whose route needs the store gets 503 too',
    )

    const ready = await app.inject({ url: '/readyz' })
    assert.equal(ready.statusCode, 503)
    assert.equal(ready.json().code, 'unavailable')
  })

  it('graceful shutdown finishes in-flight requests and loses no audit event', async () => {
    // Rate limiting off: 300 failures from one address would otherwise be throttled (429)
    // before they are audited one by one, which is not what this test is about.
    const server = await startTestServer({ rateLimit: { enabled: false } })
    const failures = 300
    const requests: Array<Promise<unknown>> = []
    for (let i = 0; i < failures; i++) {
      requests.push(server.request('/api/v1/me', ['Authorization', `Bearer garbage-${i}`]))
    }
    let results: Array<{ status: number }>
    try {
      results = (await Promise.all(requests)) as Array<{ status: number }>
    } finally {
      // Close immediately: the audit writer has not flushed most of these yet.
      await server.close()
    }
    assert.ok(results.every((r) => r.status === 401))
    const db = new DatabaseSync(join(server.dataDir, 'tokengate.db'), { readOnly: true })
    const row = db
      .prepare("SELECT count(*) AS n FROM audit_events WHERE type = 'auth.failed'")
      .get() as { n: number }
    db.close()
    assert.equal(row.n, failures)
  })
})
