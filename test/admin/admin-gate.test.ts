/**
 * The admin API goes through the gate (#33): the failed-authentication limit per address,
 * request ids by the one rule, and the admin token a credential kind. Over the real admin
 * HTTPS listener.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { adminRequest, bearer, issueAdminTokenCli, postSignIn } from './admin-client.ts'

const LIMIT = 3
const badToken = (i: number) => `tga_${String(i).padStart(40, 'A')}`

interface AuditRow {
  type: string
  actor: string | null
  request_id: string | null
  details: string
}

/** The audit rows once `ready` holds for one of them (written behind the answer). */
async function auditRows(server: TestServer, ready: (row: AuditRow) => boolean) {
  let rows: AuditRow[] = []
  for (let i = 0; i < 100; i++) {
    const db = new DatabaseSync(join(server.dataDir, 'tokengate.db'), { readOnly: true })
    rows = (
      db
        .prepare('SELECT type, actor, request_id, details FROM audit_events')
        .all() as unknown as AuditRow[]
    ).map((r) => ({ ...r }))
    db.close()
    if (rows.some(ready)) break
    await sleep(50)
  }
  return rows
}

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
        headers: { ...bearer(badToken(i)), 'x-request-id': `admin-bad-${i}` },
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

    // The recorder: each 401 audited with its request id and a fingerprint, never the token;
    // the throttled attempts are not audited one by one (auth.throttled, once per window).
    const rows = await auditRows(server, (r) => r.request_id === `admin-bad-${LIMIT - 1}`)
    const failed = rows.filter(
      (r) => r.type === 'auth.failed' && r.request_id?.startsWith('admin-bad-'),
    )
    assert.deepEqual(failed.map((r) => r.request_id).sort(), [
      'admin-bad-0',
      'admin-bad-1',
      'admin-bad-2',
    ])
    for (const row of failed) {
      assert.match(String(row.actor), /^hmac:[0-9a-f]{8}$/)
      for (let i = 0; i < LIMIT; i++) assert.ok(!JSON.stringify(row).includes(badToken(i)))
    }
    assert.ok(!rows.some((r) => r.request_id === `admin-bad-${LIMIT}`))
  })

  test('console sessions are a kind of the admin gate: an unknown session cookie goes back to sign-in, audited with its request id; a live one opens the page', async () => {
    const unknown = `__Host-tokengate-admin=${'x'.repeat(43)}`
    const refused = await adminRequest(server, '/admin/tenants', {
      headers: { cookie: unknown, 'x-request-id': 'console-stale-1' },
    })
    assert.equal(refused.status, 303)
    assert.equal(refused.headers.location, '/admin/sign-in?ended=1')
    const rows = await auditRows(server, (r) => r.request_id === 'console-stale-1')
    const row = rows.find((r) => r.request_id === 'console-stale-1')
    assert.equal(row?.type, 'auth.failed')
    assert.match(String(row?.actor), /^hmac:[0-9a-f]{8}$/)
    assert.ok(!JSON.stringify(row).includes('x'.repeat(43)))

    const signedIn = await postSignIn(server, operator)
    assert.equal(signedIn.status, 303)
    const cookie = String(signedIn.headers['set-cookie']).split(';')[0] as string
    const page = await adminRequest(server, '/admin/tenants', { headers: { cookie } })
    assert.equal(page.status, 200)
    assert.match(page.text, /admin:alice/)
    // The API takes no cookies: the session opens no API request (401, or 429: this address
    // is over its failed-authentication limit from the test above).
    const api = await adminRequest(server, '/admin/api/v1/me', { headers: { cookie } })
    assert.ok([401, 429].includes(api.status), String(api.status))
  })

  test("the admin kinds are the admin gate's only: an admin token on the API listener is 401", async () => {
    const onApi = await server.request('/api/v1/me', ['Authorization', `Bearer ${operator}`])
    assert.equal(onApi.status, 401)
    assert.equal(onApi.json.code, 'invalid_token')
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

describe('the console sign-in form through the admin gate', () => {
  let server: TestServer
  let operator: string

  before(async () => {
    server = await startTestServer({
      admin: { enabled: true, port: 0 },
      rateLimit: { failedAuth: { max: 2, windowSec: 60 } },
    })
    ;({ token: operator } = await issueAdminTokenCli(server, 'bea', 'operator'))
  })
  after(() => server.close())

  test('pasted credentials count towards the failed-authentication limit and are audited: failed, failed, then throttled', async () => {
    const paste = (credential: string, requestId: string) =>
      postSignIn(server, credential, { 'x-request-id': requestId })
    // The operator's token verified here once (the limiter remembers it).
    assert.equal(
      (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(operator) })).status,
      200,
    )
    const locations: unknown[] = []
    for (let i = 0; i < 3; i++) {
      locations.push((await paste(badToken(100 + i), `paste-bad-${i}`)).headers.location)
    }
    assert.deepEqual(locations, [
      '/admin/sign-in?failed=1',
      '/admin/sign-in?failed=1',
      '/admin/sign-in?throttled=1',
    ])
    const page = await adminRequest(server, '/admin/sign-in?throttled=1')
    assert.match(page.text, /Too many failed sign-ins from this address/)
    // The same address's bearer attempts share the limit.
    const api = await adminRequest(server, '/admin/api/v1/me', { headers: bearer(badToken(200)) })
    assert.equal(api.status, 429)
    // Each refused paste is an auth.failed row with its request id and no token.
    const rows = await auditRows(server, (r) => r.request_id === 'paste-bad-1')
    const failed = rows.filter(
      (r) => r.type === 'auth.failed' && r.request_id?.startsWith('paste-bad-'),
    )
    assert.deepEqual(failed.map((r) => r.request_id).sort(), ['paste-bad-0', 'paste-bad-1'])
    assert.ok(!JSON.stringify(rows).includes(badToken(100)))
    // A credential verified here before still signs in from the throttled address.
    const signedIn = await paste(operator, 'paste-good')
    assert.equal(signedIn.headers.location, '/admin/tenants')
  })
})
