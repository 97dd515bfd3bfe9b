import assert from 'node:assert/strict'
import { join } from 'node:path'
import { describe, it, type TestContext } from 'node:test'
import pino from 'pino'
import { createAuthContext } from '../../src/auth/auth-context.ts'
import { loadConfig } from '../../src/config/load.ts'
import { systemClock } from '../../src/core/ports.ts'
import { mintDevJwt } from '../../src/dev/issuer.ts'
import { seedDevData } from '../../src/dev/seed.ts'
import { buildServer } from '../../src/server/server.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { startTestServer, type TestResponse } from '../helpers/server.ts'
import { tempDir } from '../helpers/temp-dir.ts'

/** Size bounds (issue #7 "Bounds"): request head, body, JWT, page size. */

function assertProblem(r: TestResponse, status: number, code: string) {
  assert.equal(r.status, status, r.text)
  assert.match(String(r.headers['content-type']), /^application\/problem\+json/)
  assert.equal(r.json.code, code)
  assert.equal(r.json.status, status)
}

/** A JWT-shaped token of about `bytes` characters (its signature cannot verify). */
function bigJwt(bytes: number): string {
  const header = Buffer.from(JSON.stringify({ alg: 'ES256', kid: 'k' })).toString('base64url')
  const payload = Buffer.from(JSON.stringify({ pad: 'a'.repeat(bytes) })).toString('base64url')
  return `${header}.${payload}.${'s'.repeat(86)}`
}

async function injectApp(t: TestContext, overrides: Record<string, unknown>) {
  const dataDir = tempDir('tg-limits-')
  const config = loadConfig({
    env: {},
    overrides: { dev: true, dataDir, server: { plainHttp: true }, ...overrides },
  })
  const store = openSqliteStore(join(dataDir, 'tokengate.db'))
  await store.migrate()
  const seed = await seedDevData(store, dataDir, Date.now())
  const logger = pino({ level: 'silent' })
  const auth = await createAuthContext(config, store, systemClock, logger)
  const app = await buildServer({ config, auth, logger })
  t.after(async () => {
    await app.close()
    await auth.close()
    await store.close()
  })
  return { app, pat: seed.demoPat as string, dataDir }
}

describe('bounds over the wire (HTTPS)', () => {
  it('a request head over server.maxHeaderBytes → 431, and the server keeps serving', async (t) => {
    const server = await startTestServer()
    t.after(() => server.close())
    const big = await server.request('/api/v1/me', ['X-Padding', 'a'.repeat(20_000)])
    assert.equal(big.status, 431)
    const next = await server.request('/api/v1/me')
    assertProblem(next, 401, 'missing_authorization')
    assert.equal((await server.request('/healthz')).status, 200)
  })

  it('a 100 KB JWT → 431 with the default head bound; 401 when the head bound lets it through', async (t) => {
    const token = bigJwt(100_000)
    assert.ok(token.length > 100_000)
    const defaults = await startTestServer()
    t.after(() => defaults.close())
    const refused = await defaults.request('/api/v1/me', [
      'Authorization',
      `Bearer ${token}`,
      'X-Tenant-Id',
      'demo',
    ])
    assert.equal(refused.status, 431)
    assert.ok(!refused.text.includes(token.slice(0, 200)), 'the token is never echoed')

    const roomy = await startTestServer({ server: { port: 0, maxHeaderBytes: 262_144 } })
    t.after(() => roomy.close())
    const r = await roomy.request('/api/v1/me', [
      'Authorization',
      `Bearer ${token}`,
      'X-Tenant-Id',
      'demo',
    ])
    assertProblem(r, 401, 'malformed_authorization')
    assert.ok(!r.text.includes(token.slice(0, 200)), 'the token is never echoed')
    // Under the credential bound (16 KiB) but over the verifier's JWT bound (8 KiB): 401 too.
    const mid = await roomy.request('/api/v1/me', [
      'Authorization',
      `Bearer ${bigJwt(10_000)}`,
      'X-Tenant-Id',
      'demo',
    ])
    assertProblem(mid, 401, 'invalid_token')
  })
})

describe('bounds (inject)', () => {
  it('a body over server.bodyLimitBytes → 413 payload_too_large problem+json', async (t) => {
    const { app, pat } = await injectApp(t, { server: { plainHttp: true, bodyLimitBytes: 1024 } })
    const r = await app.inject({
      method: 'DELETE',
      url: '/api/v1/tokens/tok_x',
      headers: { authorization: `Bearer ${pat}`, 'content-type': 'application/json' },
      payload: JSON.stringify({ pad: 'a'.repeat(2048) }),
    })
    assert.equal(r.statusCode, 413, r.body)
    assert.match(String(r.headers['content-type']), /^application\/problem\+json/)
    const body = r.json()
    assert.equal(body.code, 'payload_too_large')
    assert.equal(body.type, 'https://tokengate.dev/problems/payload_too_large')
    assert.equal(typeof body.requestId, 'string')
    // The same request within the bound reaches the route.
    const small = await app.inject({
      method: 'DELETE',
      url: '/api/v1/tokens/tok_x',
      headers: { authorization: `Bearer ${pat}`, 'content-type': 'application/json' },
      payload: '{}',
    })
    assert.notEqual(small.statusCode, 413)
  })

  it('page size: pagination.maxLimit is the largest accepted `limit`', async (t) => {
    const { app, pat } = await injectApp(t, { pagination: { maxLimit: 20, defaultLimit: 5 } })
    const get = (query: string) =>
      app.inject({ url: `/api/v1/tokens${query}`, headers: { authorization: `Bearer ${pat}` } })
    assert.equal((await get('?limit=20')).statusCode, 200)
    const over = await get('?limit=21')
    assert.equal(over.statusCode, 400)
    assert.equal(over.json().code, 'validation_failed')
  })

  it('JWT lifetime: a token living longer than auth.maxJwtLifetimeSec → 401', async (t) => {
    const { app, dataDir } = await injectApp(t, { auth: { maxJwtLifetimeSec: 600 } })
    const jwt = (ttlSec: number) =>
      mintDevJwt(dataDir, { tenantId: 'demo', subject: 'a', permissions: [], ttlSec })
    const call = async (token: string) =>
      app.inject({
        url: '/api/v1/me',
        headers: { authorization: `Bearer ${token}`, 'x-tenant-id': 'demo' },
      })
    assert.equal((await call(await jwt(600))).statusCode, 200)
    const tooLong = await call(await jwt(3600))
    assert.equal(tooLong.statusCode, 401)
    assert.equal(tooLong.json().code, 'invalid_token')
  })
})
