/**
 * The admin API for keys as a product (issue #24), through the real admin listener: keys
 * issued with their own limits, quota, metadata and external id; edited, disabled, enabled
 * (applied by the API listener within a second, audited with the operator); usage as JSON and
 * CSV; tenant edits; admin tokens managed by operators only.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { millisUntil } from '../helpers/eventually.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { adminRequest, bearer, issueAdminTokenCli } from './admin-client.ts'

for (const backend of ['sqlite', 'postgres'] as const) {
  const skip = backend === 'postgres' ? skipReason('postgres') : false
  describe(`admin API: keys as a product (${backend})`, { skip }, () => adminKeysSuite(backend))
}

function adminKeysSuite(backend: 'sqlite' | 'postgres') {
  let server: TestServer
  let operator: string
  let readOnly: string
  let pg: PostgresServer | undefined

  before(async () => {
    pg = backend === 'postgres' ? await startPostgres() : undefined
    const databaseUrl = pg ? await pg.createDatabase() : undefined
    server = await startTestServer({
      admin: { enabled: true, port: 0 },
      usage: { flushIntervalMs: 100 },
      rateLimit: { failedAuth: { max: 0 } },
      ...(databaseUrl ? { databaseUrl } : {}),
    })
    // The CLI on the server's store: its data directory, or the same Postgres database.
    const onStore = databaseUrl
      ? {
          ...server,
          cli: (...args: string[]) => server.cli(...args, '--database-url', databaseUrl),
        }
      : server
    ;({ token: operator } = await issueAdminTokenCli(onStore, 'olive', 'operator'))
    ;({ token: readOnly } = await issueAdminTokenCli(onStore, 'reed', 'read-only'))
  })
  after(async () => {
    await server?.close()
    await pg?.stop()
  })

  const api = (path: string, method = 'GET', body?: unknown, token = operator) =>
    adminRequest(server, `/admin/api/v1${path}`, { method, headers: bearer(token), body })
  const me = (token: string) => server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])

  test('issue with limits, quota, metadata and external id; read it back with its quota usage', async () => {
    const issued = await api('/pats', 'POST', {
      tenantId: 'demo',
      subject: 'partner',
      rateLimit: { max: 50, windowSec: 1 },
      quota: { limit: 3, refill: 'daily' },
      metadata: { plan: 'pro' },
      externalId: 'cus_7',
    })
    assert.equal(issued.status, 201, issued.text)
    const id = issued.json.id as string
    assert.deepEqual(issued.json.quota, { limit: 3, refill: 'daily' })
    assert.equal((await me(issued.json.token as string)).status, 200)
    const read = await api(`/pats/${id}`)
    assert.equal(read.status, 200)
    assert.ok(!('token' in read.json))
    const usage = read.json.quotaUsage as { used: number; remaining: number; resetsAt: string }
    assert.deepEqual([usage.used, usage.remaining], [1, 2])
    assert.match(usage.resetsAt, /T00:00:00.000Z$/)
    const found = await api('/pats?externalId=cus_7')
    assert.deepEqual(
      (found.json.tokens as { id: string }[]).map((t) => t.id),
      [id],
    )
    assert.equal((await api('/pats/tok_nope')).status, 404)
  })

  test('PATCH edits a key (applied within a second), audited before/after with the operator', async () => {
    const issued = await api('/pats', 'POST', {
      tenantId: 'demo',
      subject: 'svc',
      permissions: ['tokens:read'],
    })
    const { id, token } = issued.json as { id: string; token: string }
    const tokens = () => server.request('/api/v1/tokens', ['Authorization', `Bearer ${token}`])
    assert.equal((await tokens()).status, 200)
    const edited = await api(`/pats/${id}`, 'PATCH', {
      permissions: ['audit:read'],
      name: 'renamed',
      metadata: { team: 'ops' },
    })
    assert.equal(edited.status, 200, edited.text)
    assert.equal(edited.json.changed, true)
    assert.ok((await millisUntil(async () => (await tokens()).status === 403)) < 1000)
    const audit = await api('/audit-events?type=pat.updated&tenant=demo')
    const event = (audit.json.events as { actor: string; details: Record<string, unknown> }[])[0]
    assert.equal(event?.actor, 'admin:olive')
    assert.deepEqual(event?.details, {
      tokenId: id,
      before: { name: '', permissions: ['tokens:read'], metadata: null },
      after: { name: 'renamed', permissions: ['audit:read'], metadata: { team: 'ops' } },
    })
    const bad = await api(`/pats/${id}`, 'PATCH', { quota: { limit: 0 } })
    assert.equal(bad.status, 400)
    assert.match(String(bad.json.detail), /^quota: 0 is not valid/)
    const typo = await api(`/pats/${id}`, 'PATCH', { quotas: { limit: 5 } })
    assert.equal(typo.status, 400)
    assert.match(String(typo.json.detail), /^body: "quotas" is not valid/)
    const expiry = await api(`/pats/${id}`, 'PATCH', { expiresAt: 'tomorrow' })
    assert.match(String(expiry.json.detail), /^expiresAt:/)
  })

  test('PATCH quota without a refill keeps the refill; the response notes it', async () => {
    const issued = await api('/pats', 'POST', {
      tenantId: 'demo',
      subject: 'svc',
      quota: { limit: 100, refill: 'monthly' },
    })
    const { id } = issued.json as { id: string }
    const edited = await api(`/pats/${id}`, 'PATCH', { quota: { limit: 20 } })
    assert.equal(edited.status, 200, edited.text)
    assert.deepEqual(edited.json.quota, { limit: 20, refill: 'monthly' })
    assert.deepEqual(edited.json.notes, ['quota: refill monthly kept'])
    const none = await api(`/pats/${id}`, 'PATCH', { quota: { limit: 20, refill: 'none' } })
    assert.deepEqual(none.json.quota, { limit: 20, refill: 'none' })
  })

  test('disable and enable: 401 on the API listener within a second, then 200 again', async () => {
    const issued = await api('/pats', 'POST', { tenantId: 'demo', subject: 'svc' })
    const { id, token } = issued.json as { id: string; token: string }
    const disabled = await api(`/pats/${id}/disable`, 'POST')
    assert.deepEqual([disabled.json.status, disabled.json.changed], ['disabled', true])
    assert.ok((await millisUntil(async () => (await me(token)).status === 401)) < 1000)
    const listed = await api('/pats?status=disabled&tenant=demo')
    assert.ok((listed.json.tokens as { id: string }[]).some((t) => t.id === id))
    await api(`/pats/${id}/enable`, 'POST')
    await millisUntil(async () => (await me(token)).status === 200)
  })

  test('usage per key, tenant and in all, as JSON with totals and as CSV', async () => {
    const issued = await api('/pats', 'POST', { tenantId: 'demo', subject: 'u' })
    const { id, token } = issued.json as { id: string; token: string }
    for (let i = 0; i < 3; i++) await me(token)
    await millisUntil(async () => {
      const usage = await api(`/usage?scope=key&id=${id}`)
      return (usage.json.totals as { allowed: number }).allowed === 3
    })
    const csv = await adminRequest(server, `/admin/api/v1/usage?scope=key&id=${id}&format=csv`, {
      headers: bearer(readOnly),
    })
    assert.equal(csv.status, 200)
    assert.match(String(csv.headers['content-type']), /^text\/csv/)
    assert.ok(
      csv.text.startsWith(
        'start,resolution,scope,subject,allowed,unauthorized,forbidden,limited\r\n',
      ),
    )
    const all = await api('/usage?resolution=hour')
    assert.ok((all.json.totals as { allowed: number }).allowed >= 3)
    const top = await api('/tenants/demo/top-keys?resolution=day')
    assert.ok((top.json.keys as { tokenId: string }[]).some((k) => k.tokenId === id))
    assert.equal((await api('/usage?scope=key')).status, 400)
    assert.equal((await api('/usage?resolution=week')).status, 400)
  })

  test('tenant rate limit through PATCH /tenants/{id}', async () => {
    const edited = await api('/tenants/demo', 'PATCH', { rateLimit: { max: 9000, windowSec: 60 } })
    assert.equal(edited.status, 200, edited.text)
    assert.deepEqual(edited.json.rateLimit, { max: 9000, windowSec: 60 })
    assert.deepEqual((await api('/tenants/demo')).json.rateLimit, { max: 9000, windowSec: 60 })
    const back = await api('/tenants/demo', 'PATCH', { rateLimit: null })
    assert.equal(back.json.rateLimit, null)
    assert.equal((await api('/tenants/nobody', 'PATCH', { name: 'x' })).status, 404)
  })

  test('admin tokens: operators list, issue (shown once) and revoke; read-only may only list', async () => {
    const issued = await api('/admin-tokens', 'POST', {
      name: 'carol',
      role: 'read-only',
      expiresInDays: 7,
    })
    assert.equal(issued.status, 201, issued.text)
    const token = issued.json.token as string
    assert.match(token, /^tga_/)
    assert.equal((await api('/me', 'GET', undefined, token)).json.actor, 'admin:carol')
    const list = await api('/admin-tokens', 'GET', undefined, readOnly)
    const listed = list.json.tokens as { id: string; name: string }[]
    assert.ok(listed.some((t) => t.name === 'carol'))
    assert.ok(!list.text.includes(token))
    assert.equal(
      (await api('/admin-tokens', 'POST', { name: 'x', role: 'operator' }, readOnly)).status,
      403,
    )
    const revoked = await api(`/admin-tokens/${issued.json.id}/revoke`, 'POST')
    assert.deepEqual([revoked.json.status, revoked.json.changed], ['revoked', true])
    assert.equal((await api('/me', 'GET', undefined, token)).status, 401)
    const bad = await api('/admin-tokens', 'POST', { name: 'x', role: 'root' })
    assert.match(String(bad.json.detail), /^role:/)
    const long = await api('/admin-tokens', 'POST', {
      name: 'x',
      role: 'operator',
      expiresInDays: 400,
    })
    assert.match(String(long.json.detail), /^expiresInDays:/)
  })
}
