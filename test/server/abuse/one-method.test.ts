/**
 * #11 item 14, RFC 6750 §2: a client uses exactly one method to send its token. A valid
 * `Authorization` header plus an `access_token` query parameter or form-body field is
 * 400 `invalid_request` with the Bearer challenge, never a 200: over TLS against the
 * running server, and through the gateway to a real upstream (which would answer 200).
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { type Gateway, startGateway, startUpstream, type Upstream } from '../../gateway/harness.ts'
import { startTestServer, type TestServer } from '../../helpers/server.ts'

function assertOneMethodRefusal(
  status: number,
  headers: Record<string, unknown>,
  body: Record<string, unknown>,
) {
  assert.equal(status, 400)
  assert.equal(body.code, 'invalid_request')
  assert.match(String(headers['content-type']), /^application\/problem\+json/)
  assert.match(
    String(headers['www-authenticate']),
    /^Bearer realm="tokengate", error="invalid_request"/,
  )
  assert.equal(headers['cache-control'], 'no-store')
}

describe('one method per request: server', () => {
  let server: TestServer
  let pat: string
  before(async () => {
    server = await startTestServer()
    pat = server.running.devSeed?.demoPat as string
  })
  after(() => server.close())

  it('header + access_token query parameter → 400 invalid_request', async () => {
    for (const query of [`access_token=${pat}`, 'x=1&access_token=', 'access%5Ftoken=abc']) {
      const r = await server.request(`/api/v1/me?${query}`, ['Authorization', `Bearer ${pat}`])
      assertOneMethodRefusal(r.status, r.headers, r.json)
    }
  })

  it('also through a spelling of the path that only the router decodes', async () => {
    const r = await server.request(`/api/v%31/me?access_token=x`, [
      'Authorization',
      `Bearer ${pat}`,
    ])
    assertOneMethodRefusal(r.status, r.headers, r.json)
  })

  it('the refusal is audited like any failure, without the query that carried the token', async () => {
    const marker = `/api/v1/me?access_token=${pat}&audit-marker=1`
    const r = await server.request(marker, ['Authorization', `Bearer ${pat}`])
    assert.equal(r.status, 400)
    let rows: Array<{ outcome: string; tenant_id: string | null; details: string }> = []
    for (let i = 0; i < 40 && rows.length === 0; i++) {
      const db = new DatabaseSync(join(server.dataDir, 'tokengate.db'), { readOnly: true })
      rows = db
        .prepare(
          "SELECT outcome, tenant_id, details FROM audit_events WHERE type = 'auth.failed' AND outcome = 'invalid_request'",
        )
        .all() as typeof rows
      db.close()
      if (rows.length === 0) await sleep(50)
    }
    assert.ok(rows.length > 0, 'an auth.failed event with outcome invalid_request')
    for (const row of rows) {
      assert.equal(row.tenant_id, 'demo')
      assert.equal(JSON.parse(row.details).path, '/api/v1/me')
      assert.ok(!row.details.includes(pat), 'the token in the query is not stored')
    }
  })

  it('the header alone, or an unrelated query, still answers 200', async () => {
    const r = await server.request('/api/v1/me?token=1&access_tokens=2', [
      'Authorization',
      `Bearer ${pat}`,
    ])
    assert.equal(r.status, 200)
  })
})

describe('one method per request: gateway with a real upstream', () => {
  let upstream: Upstream
  let gateway: Gateway
  before(async () => {
    upstream = await startUpstream()
    gateway = await startGateway({ upstream: upstream.url })
  })
  after(async () => {
    await gateway.close()
    await upstream.close()
  })

  const post = (token: string, body: string, query = '') =>
    fetch(`${gateway.url}/api/v1/projects/p1${query}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      body,
    })

  it('header + access_token form field → 400 invalid_request, never proxied', async () => {
    const pat = await gateway.pat([])
    const seen = upstream.seen.length
    const r = await post(pat, `name=x&access_token=${pat}`)
    assertOneMethodRefusal(
      r.status,
      Object.fromEntries(r.headers),
      (await r.json()) as Record<string, unknown>,
    )
    const q = await post(pat, 'name=x', `?access_token=${pat}`)
    assert.equal(q.status, 400)
    assert.equal(upstream.seen.length, seen, 'reached the upstream')
  })

  it('a form body over the body limit → 413 problem+json, as on the API port, never proxied', async () => {
    const pat = await gateway.pat([])
    const seen = upstream.seen.length
    const r = await post(pat, `name=${'x'.repeat(1_100_000)}`)
    assert.equal(r.status, 413)
    assert.match(r.headers.get('content-type') ?? '', /^application\/problem\+json/)
    const text = await r.text()
    assert.equal((JSON.parse(text) as { code: string }).code, 'payload_too_large')
    assert.doesNotMatch(text, /FST_|statusCode/)
    assert.equal(upstream.seen.length, seen, 'reached the upstream')
  })

  it('a form body without access_token is proxied intact', async () => {
    const pat = await gateway.pat([])
    const r = await post(pat, 'name=x&token_type=y')
    assert.equal(r.status, 200)
    const echoed = (await r.json()) as { bodyBytes: number }
    assert.equal(echoed.bodyBytes, 'name=x&token_type=y'.length)
  })
})
