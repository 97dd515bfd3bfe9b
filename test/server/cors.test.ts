/**
 * #11 item 11: CORS for configured origins, proven in a real headless Chromium. A page
 * served from another 127.0.0.1 origin calls the API over TLS with a JWT and X-Tenant-Id
 * and reads the 200 JSON; a page from an origin not configured is refused by the browser.
 * Preflights need no token and never count as failed authentications.
 */
import assert from 'node:assert/strict'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import type { Browser } from 'playwright-core'
import { mintDevJwt } from '../../src/dev/issuer.ts'
import { launchChromium } from '../helpers/browser.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { skipReason } from '../helpers/services.ts'

/** A page origin: serves one empty HTML page on 127.0.0.1:<port>. */
async function startPageServer(): Promise<{ origin: string; server: Server }> {
  const server = createServer((_request, response) => {
    response
      .writeHead(200, { 'content-type': 'text/html' })
      .end('<!doctype html><title>app</title>')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server }
}

const preflight = (origin: string) => [
  'Origin',
  origin,
  'Access-Control-Request-Method',
  'GET',
  'Access-Control-Request-Headers',
  'authorization,x-tenant-id',
]

describe('CORS', () => {
  let api: TestServer
  let allowed: { origin: string; server: Server }
  let other: { origin: string; server: Server }
  before(async () => {
    allowed = await startPageServer()
    other = await startPageServer()
    api = await startTestServer({
      server: { port: 0, cors: { origins: [allowed.origin] } },
      rateLimit: { failedAuth: { max: 3, windowSec: 60 } },
    })
  })
  after(async () => {
    await api.close()
    allowed.server.close()
    other.server.close()
  })

  it('answers a preflight from a configured origin without a token, allowing Authorization and X-Tenant-Id', async () => {
    const r = await api.request('/api/v1/me', preflight(allowed.origin), 'OPTIONS')
    assert.equal(r.status, 204)
    assert.equal(r.headers['access-control-allow-origin'], allowed.origin)
    const headers = String(r.headers['access-control-allow-headers']).toLowerCase()
    assert.ok(headers.includes('authorization') && headers.includes('x-tenant-id'), headers)
    assert.match(String(r.headers.vary), /origin/i)
  })

  it('gives an origin not configured no CORS headers at all', async () => {
    for (const method of ['OPTIONS', 'GET']) {
      const r = await api.request('/api/v1/me', preflight(other.origin), method)
      const cors = Object.keys(r.headers).filter((h) => h.startsWith('access-control-'))
      assert.deepEqual(cors, [], `${method}: ${cors}`)
      assert.match(String(r.headers.vary), /origin/i)
    }
  })

  it('never counts a preflight as a failed authentication', async () => {
    for (let i = 0; i < 6; i++) {
      const origin = i % 2 ? allowed.origin : other.origin
      const r = await api.request('/api/v1/tokens', preflight(origin), 'OPTIONS')
      assert.equal(r.status, 204)
    }
    // One 401 so far (the GET above): a bad token is the second, answered 401, not 429.
    const bad = await api.request('/api/v1/me', ['Authorization', 'Bearer pat_nope'])
    assert.equal(bad.status, 401)
  })

  describe('in a real browser', { skip: skipReason('chromium') }, () => {
    let browser: Browser
    let jwt: string
    before(async () => {
      browser = await launchChromium(api.ca)
      jwt = await mintDevJwt(api.dataDir, { tenantId: 'demo', subject: 'spa', permissions: [] })
    })
    after(() => browser?.close())

    const callFrom = async (origin: string) => {
      const page = await browser.newPage()
      try {
        await page.goto(`${origin}/`)
        return await page.evaluate(
          async ({ url, token }) => {
            try {
              const response = await fetch(url, {
                headers: { Authorization: `Bearer ${token}`, 'X-Tenant-Id': 'demo' },
              })
              return { status: response.status, body: await response.json() }
            } catch (error) {
              return { error: String(error) }
            }
          },
          { url: `${api.url}/api/v1/me`, token: jwt },
        )
      } finally {
        await page.close()
      }
    }

    it('a page on the configured origin reads the 200 JSON', async () => {
      const result = await callFrom(allowed.origin)
      assert.equal(result.status, 200, JSON.stringify(result))
      assert.equal(result.body.tenantId ?? result.body.tenant, 'demo')
    })

    it('a page on another origin is refused by the browser', async () => {
      const result = await callFrom(other.origin)
      assert.match(String(result.error), /TypeError|Failed to fetch/, JSON.stringify(result))
    })
  })
})
