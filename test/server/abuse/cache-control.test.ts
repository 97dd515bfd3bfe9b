/**
 * #11 item 13: `Cache-Control: no-store` on every /api/v1 response, 2xx included, and on
 * every problem response of every kind. Requests over real TLS to the running server, and a
 * plain-HTTP listener of the same app for the kinds that need a broken store or a bug.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import pino from 'pino'
import { createAuthContext } from '../../../src/auth/auth-context.ts'
import { loadConfig } from '../../../src/config/load.ts'
import { systemClock } from '../../../src/core/ports.ts'
import { seedDevData } from '../../../src/dev/seed.ts'
import { buildServer } from '../../../src/server/server.ts'
import { openSqliteStore } from '../../../src/stores/sqlite.ts'
import { startTestServer, type TestServer } from '../../helpers/server.ts'
import { tempDir } from '../../helpers/temp-dir.ts'

describe('Cache-Control: no-store on every kind of response', () => {
  let server: TestServer
  let bearer: string[]
  before(async () => {
    server = await startTestServer({
      server: { port: 0, bodyLimitBytes: 64, maxHeaderBytes: 2048 },
      rateLimit: { failedAuth: { max: 2, windowSec: 60 } },
    })
    bearer = ['Authorization', `Bearer ${server.running.devSeed?.demoPat}`]
  })
  after(() => server.close())

  const cases: [
    string,
    number,
    () => Promise<{ status: number; headers: Record<string, unknown> }>,
  ][] = [
    ['200 /me', 200, () => server.request('/api/v1/me', bearer)],
    ['200 /tokens', 200, () => server.request('/api/v1/tokens', bearer)],
    ['401', 401, () => server.request('/api/v1/me')],
    ['404 unknown path', 404, () => server.request('/api/v1/nope', bearer)],
    ['400 validation', 400, () => server.request('/api/v1/tokens?limit=abc', bearer)],
  ]
  for (const [name, status, send] of cases) {
    it(name, async () => {
      const r = await send()
      assert.equal(r.status, status)
      assert.equal(r.headers['cache-control'], 'no-store')
    })
  }

  const raw = async (request: string) => {
    const r = await server.raw(request)
    return { status: r.status, cacheControl: /\r\ncache-control: ([^\r]*)/i.exec(r.text)?.[1] }
  }
  const head = (method: string, extra: string[]) =>
    [
      `${method} /api/v1/tokens/x HTTP/1.1`,
      'Host: localhost',
      `${bearer[0]}: ${bearer[1]}`,
      ...extra,
    ].join('\r\n')

  it('413 body too large', async () => {
    const body = JSON.stringify({ x: 'y'.repeat(200) })
    const r = await raw(
      `${head('DELETE', ['Content-Type: application/json', `Content-Length: ${body.length}`])}\r\n\r\n${body}`,
    )
    assert.equal(r.status, 413)
    assert.equal(r.cacheControl, 'no-store')
  })
  it('415 unsupported media type', async () => {
    const r = await raw(
      `${head('DELETE', ['Content-Type: text/xml', 'Content-Length: 4'])}\r\n\r\n<a/>`,
    )
    assert.equal(r.status, 415)
    assert.equal(r.cacheControl, 'no-store')
  })
  it('431 head too large', async () => {
    const r = await raw(`${head('GET', [`X-Big: ${'a'.repeat(4096)}`])}\r\n\r\n`)
    assert.equal(r.status, 431)
    assert.equal(r.cacheControl, 'no-store')
  })
  it('400 unparsable request', async () => {
    const r = await raw('GET /api/v1/me HTTP/1.1\r\nHost: localhost\r\nbroken\r\n\r\n')
    assert.equal(r.status, 400)
    assert.equal(r.cacheControl, 'no-store')
  })
  it('429 failed-auth limit', async () => {
    let last = 0
    for (let i = 0; i < 4; i++) {
      const r = await server.request('/api/v1/me', ['Authorization', 'Bearer pat_x'])
      last = r.status
      if (last === 429) assert.equal(r.headers['cache-control'], 'no-store')
    }
    assert.equal(last, 429)
  })
})

describe('Cache-Control: no-store on 500 and 503', () => {
  it('an unexpected error (500), a store outage (503) and /readyz 503', async (t) => {
    const dataDir = tempDir('tg-cc-')
    const config = loadConfig({
      env: {},
      overrides: { dev: true, dataDir, server: { plainHttp: true, port: 0 } },
    })
    const store = openSqliteStore(join(dataDir, 'tokengate.db'))
    await store.migrate()
    const seed = await seedDevData(store, dataDir, Date.now())
    const auth = await createAuthContext(config, store, systemClock, pino({ level: 'silent' }))
    const app = await buildServer({ config, auth, logger: pino({ level: 'silent' }) })
    app.get('/api/v1/boom', () => {
      throw new Error('a bug')
    })
    t.after(() => app.close())
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    const headers = { authorization: `Bearer ${seed.demoPat}` }

    const boom = await fetch(`${url}/api/v1/boom`, { headers })
    assert.equal(boom.status, 500)
    assert.equal(boom.headers.get('cache-control'), 'no-store')

    await store.close()
    auth.lookups.clear()
    const down = await fetch(`${url}/api/v1/me`, { headers })
    assert.equal(down.status, 503)
    assert.equal(down.headers.get('cache-control'), 'no-store')
    const ready = await fetch(`${url}/readyz`)
    assert.equal(ready.status, 503)
    assert.equal(ready.headers.get('cache-control'), 'no-store')
  })
})
