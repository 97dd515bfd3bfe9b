/**
 * Keys as a product through the running server (HTTPS, SQLite, the operator CLI on the same
 * data): a key's and a tenant's own rate limits replace the defaults; a disabled key is 401
 * and comes back when enabled; changes apply within a second; usage is counted by outcome.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { millisUntil } from '../helpers/eventually.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'

interface Issued {
  token: string
  id: string
}

describe('keys as a product, through the server', () => {
  let server: TestServer

  before(async () => {
    // Defaults far away: every 429 below comes from a key's or tenant's own limit.
    server = await startTestServer({
      rateLimit: { perToken: { max: 1000 }, perTenant: { max: 10_000 }, failedAuth: { max: 0 } },
      usage: { flushIntervalMs: 100 },
    })
    for (const id of ['lim', 'calm']) {
      assert.equal((await server.cli('tenant', 'create', id)).code, 0)
    }
  })
  after(() => server?.close())

  async function issue(tenant: string, ...flags: string[]): Promise<Issued> {
    const result = await server.cli(
      'pat',
      'issue',
      '--tenant',
      tenant,
      '--subject',
      'svc',
      '--permission',
      'tokens:read',
      '--json',
      ...flags,
    )
    assert.equal(result.code, 0, result.stderr)
    return JSON.parse(result.stdout) as Issued
  }

  const me = (token: string) => server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])

  it("a key's own rate limit replaces the default, with its RateLimit headers", async () => {
    const { token } = await issue('calm', '--rate-limit', '3/1m')
    const answers = []
    for (let i = 0; i < 4; i++) answers.push(await me(token))
    assert.deepEqual(
      answers.map((a) => a.status),
      [200, 200, 200, 429],
    )
    assert.equal(answers[0]?.headers['ratelimit-policy'], '"per-token";q=3;w=60')
    assert.equal(answers[3]?.json.code, 'rate_limited')
    assert.ok(Number(answers[3]?.headers['retry-after']) > 0)
    // Another key of the same tenant keeps the default.
    const other = await issue('calm')
    assert.equal((await me(other.token)).headers['ratelimit-policy'], '"per-token";q=1000;w=60')
  })

  it("a tenant's own rate limit replaces the default across its keys, within a second of the edit", async () => {
    const a = await issue('lim')
    const b = await issue('lim')
    assert.equal((await server.cli('tenant', 'edit', 'lim', '--rate-limit', '4/1h')).code, 0)
    const applied = await millisUntil(
      async () => (await me(a.token)).headers['ratelimit-policy'] === '"per-tenant";q=4;w=3600',
    )
    assert.ok(applied < 1000, `${Math.round(applied)} ms`)
    const statuses = []
    for (let i = 0; i < 4; i++) statuses.push((await me(i % 2 === 0 ? a.token : b.token)).status)
    assert.ok(statuses.includes(429), statuses.join(','))
    const refused = await me(b.token)
    assert.equal(refused.status, 429)
    assert.equal(refused.json.policy, 'per-tenant')
    assert.equal((await server.cli('tenant', 'edit', 'lim', '--clear-rate-limit')).code, 0)
    await millisUntil(async () => (await me(b.token)).status === 200)
  })

  it('a disabled key is 401 invalid_token within a second, and works again when enabled', async () => {
    const { token, id } = await issue('calm')
    assert.equal((await me(token)).status, 200)
    assert.equal((await server.cli('pat', 'disable', id)).code, 0)
    const refusedAfter = await millisUntil(async () => (await me(token)).status === 401)
    assert.ok(refusedAfter < 1000, `${Math.round(refusedAfter)} ms`)
    const refused = await me(token)
    assert.equal(refused.json.code, 'invalid_token')
    assert.match(String(refused.headers['www-authenticate']), /error="invalid_token"/)
    // The tenant's own listing shows it as disabled (GET /api/v1/tokens).
    const reader = await issue('calm')
    const listed = await server.request(`/api/v1/tokens/${id}`, [
      'Authorization',
      `Bearer ${reader.token}`,
    ])
    assert.equal(listed.json.status, 'disabled')
    assert.equal((await server.cli('pat', 'enable', id)).code, 0)
    await millisUntil(async () => (await me(token)).status === 200)
  })

  it('an edit of permissions applies within a second (403, then 200)', async () => {
    const { token, id } = await issue('calm')
    const tokens = () => server.request('/api/v1/tokens', ['Authorization', `Bearer ${token}`])
    assert.equal((await tokens()).status, 200)
    assert.equal((await server.cli('pat', 'edit', id, '--permission', 'audit:read')).code, 0)
    const applied = await millisUntil(async () => (await tokens()).status === 403)
    assert.ok(applied < 1000, `${Math.round(applied)} ms`)
  })

  it('usage by outcome is counted per key and tenant (allowed, 401, 403, 429)', async () => {
    const { token, id } = await issue('calm', '--rate-limit', '4/1h')
    const asKey = ['Authorization', `Bearer ${token}`]
    await me(token) // allowed
    await server.request('/api/v1/audit-events', asKey) // 403: no audit:read
    await me(token) // allowed
    await me(token) // allowed (the 4th request of the hour: the 403 counted too)
    await me(token) // 429
    const totalsOf = async (key: string) =>
      JSON.parse((await server.cli('pat', 'usage', key, '--json', '--resolution', 'hour')).stdout)
        .totals as Record<string, number>
    await millisUntil(async () => ((await totalsOf(id)).limited ?? 0) >= 1)
    assert.deepEqual(await totalsOf(id), { allowed: 3, unauthorized: 0, forbidden: 1, limited: 1 })

    // A disabled key's refusals are counted against it too.
    const disabled = await issue('calm')
    assert.equal((await server.cli('pat', 'disable', disabled.id)).code, 0)
    await millisUntil(async () => (await me(disabled.token)).status === 401)
    await millisUntil(async () => ((await totalsOf(disabled.id)).unauthorized ?? 0) >= 1)

    const tenant = JSON.parse(
      (await server.cli('tenant', 'usage', 'calm', '--json', '--resolution', 'day', '--top', '50'))
        .stdout,
    ) as { totals: Record<string, number>; topKeys: { tokenId: string }[] }
    assert.ok((tenant.totals.allowed ?? 0) >= 3)
    assert.ok(tenant.topKeys.some((k) => k.tokenId === id))
  })
})
