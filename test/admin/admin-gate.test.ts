/**
 * The admin API goes through the gate (#33): the failed-authentication limit per address,
 * request ids by the one rule, and the admin token a credential kind. Over the real admin
 * HTTPS listener.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { adminRequest, bearer, issueAdminTokenCli } from './admin-client.ts'

const LIMIT = 3

describe('admin API through the gate', () => {
  let server: TestServer
  let operator: string

  before(async () => {
    server = await startTestServer({
      admin: { enabled: true, port: 0 },
      rateLimit: { failedAuth: { max: LIMIT, windowSec: 60 } },
    })
    ;({ token: operator } = await issueAdminTokenCli(server, 'alice', 'operator'))
  })
  after(() => server.close())

  test('bad admin tokens from one address: 401 up to the limit, then 429 before verification; a known token still works', async () => {
    // A verified token first: the limit lets a credential verified here recently through.
    assert.equal(
      (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(operator) })).status,
      200,
    )
    const statuses: number[] = []
    let last: Awaited<ReturnType<typeof adminRequest>> | undefined
    for (let i = 0; i < LIMIT + 2; i++) {
      last = await adminRequest(server, '/admin/api/v1/tenants', {
        headers: bearer(`tga_${String(i).padStart(40, 'A')}`),
      })
      statuses.push(last.status)
    }
    assert.deepEqual(statuses, [401, 401, 401, 429, 429])
    assert.equal(last?.json.code, 'rate_limited')
    assert.ok(Number(last?.headers['retry-after']) > 0)
    // The operator behind the same address is not locked out.
    assert.equal(
      (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(operator) })).status,
      200,
    )
  })

  test('request ids: a safe X-Request-Id is echoed, otherwise one is made (never req-N)', async () => {
    const echoed = await adminRequest(server, '/admin/api/v1/me', {
      headers: { ...bearer(operator), 'x-request-id': 'admin-trace-1' },
    })
    assert.equal(echoed.headers['x-request-id'], 'admin-trace-1')
    const made = await adminRequest(server, '/admin/api/v1/me', { headers: bearer(operator) })
    const id = String(made.headers['x-request-id'])
    assert.doesNotMatch(id, /^req-\d+$/)
    assert.match(id, /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/)
  })
})
