/**
 * #11 item 7: no token in any log line at any level. The server logs at `trace` while it is
 * sent tokens in paths, in a malformed raw packet (Fastify's client-error path) and as the
 * caller's X-Request-Id; no token text may appear in any captured line.
 */
import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { after, before, describe, it } from 'node:test'
import { issuePat } from '../../../src/core/pat.ts'
import { startTestServer, type TestServer } from '../../helpers/server.ts'

const OTHER_PAT = issuePat({
  tenantId: 'demo',
  subject: 'x',
  name: 'x',
  permissions: [],
  expiresAt: Date.now() + 60_000,
  now: Date.now(),
}).token
const JWT_SHAPED =
  'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzZWNyZXQtc3ViamVjdCJ9.U2lnbmF0dXJlU2lnbmF0dXJlU2ln'

/** The distinctive part of each token: any of it in a log line is a leak. */
const secrets = (pat: string) => [
  pat.slice(4),
  OTHER_PAT.slice(4),
  JWT_SHAPED.split('.')[2] as string,
  JWT_SHAPED.split('.')[1] as string,
]

describe('no token in any log line, at trace', () => {
  let server: TestServer
  let pat: string
  before(async () => {
    server = await startTestServer({ log: { level: 'trace' } })
    pat = server.running.devSeed?.demoPat as string
  })
  after(() => server.close())

  it('redacts tokens in logged paths, never logs raw packets, replaces token-shaped request ids', async () => {
    const auth = ['Authorization', `Bearer ${pat}`]
    // A PAT in the path at info (the revoke route's own URL shape).
    await server.request(`/api/v1/tokens/${OTHER_PAT}`, auth, 'DELETE')
    await server.request(`/api/v1/tokens/${OTHER_PAT}?x=1`, [], 'GET')
    await server.request(`/api/v1/${JWT_SHAPED}`, auth)
    await server.request(`/api/v1/%70at_${OTHER_PAT.slice(4)}`, auth)
    // A token as the caller's request id.
    const echoed = await server.request('/api/v1/me', [...auth, 'X-Request-Id', OTHER_PAT])
    assert.equal(echoed.status, 200)
    assert.notEqual(echoed.headers['x-request-id'], OTHER_PAT)
    const jwtId = await server.request('/api/v1/me', [...auth, 'X-Request-Id', JWT_SHAPED])
    assert.notEqual(jwtId.headers['x-request-id'], JWT_SHAPED)
    // A malformed packet carrying the Authorization header: the client-error path.
    const bad = await server.raw(
      `GET /api/v1/me HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${pat}\r\nX: ${JWT_SHAPED}\r\nbroken header line\r\n\r\n`,
    )
    assert.equal(bad.status, 400)
    await new Promise((resolve) => setTimeout(resolve, 300))

    assert.ok(server.logs.length > 0)
    assert.ok(
      server.logs.some((line) => line.includes('[redacted]')),
      'no redacted path logged',
    )
    for (const line of server.logs) {
      // pino writes a Buffer (Fastify's `rawPacket`) as `"data":[71,69,84,...]`: decode those.
      const buffers = [...line.matchAll(/"data":\[([\d,]+)\]/g)].map((m) =>
        Buffer.from((m[1] as string).split(',').map(Number)).toString('latin1'),
      )
      for (const text of [line, ...buffers]) {
        for (const secret of secrets(pat)) {
          assert.ok(!text.includes(secret), `token text in a log line: ${text.slice(0, 300)}`)
        }
      }
    }
  })
})
