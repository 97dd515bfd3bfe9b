/**
 * Attacks on a key's quota, as raw requests against the running server (HTTPS, SQLite): a
 * burst of concurrent requests, a restart, a rotation, an edit of something else, a request
 * refused for its rate. None may win a use beyond the quota; an exhausted key stays a valid
 * key refused with 429 `quota_exhausted`, never a 401.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { bearer, type Gate, startGate } from './harness.ts'

interface Issued {
  token: string
  id: string
}

async function issue(server: TestServer, ...flags: string[]): Promise<Issued> {
  const result = await server.cli(
    'pat',
    'issue',
    '--tenant',
    'demo',
    '--subject',
    'quota-attack',
    '--json',
    ...flags,
  )
  assert.equal(result.code, 0, result.stderr)
  return JSON.parse(result.stdout) as Issued
}

const me = (server: TestServer, token: string) => server.request('/api/v1/me', bearer(token))

/** Statuses of `count` requests sent at once. */
async function burst(server: TestServer, token: string, count: number): Promise<number[]> {
  const responses = await Promise.all(Array.from({ length: count }, () => me(server, token)))
  return responses.map((r) => r.status)
}

const tally = (statuses: readonly number[]) =>
  statuses.reduce<Record<number, number>>((acc, s) => {
    acc[s] = (acc[s] ?? 0) + 1
    return acc
  }, {})

describe('attack: winning uses beyond a key’s quota', () => {
  let server: Gate

  before(async () => {
    server = await startGate()
  })
  after(() => server?.close())

  it('a burst of 60 concurrent requests on a quota of 25 gets exactly 25 through', async () => {
    const { token } = await issue(server, '--quota', '25')
    const statuses = await burst(server, token, 60)
    assert.deepEqual(tally(statuses), { 200: 25, 429: 35 })
    const refused = await me(server, token)
    assert.equal(refused.status, 429)
    assert.equal(refused.json.code, 'quota_exhausted')
    // No refill: retrying will not help, so no Retry-After; never a 401 challenge.
    assert.equal(refused.headers['retry-after'], undefined)
    assert.equal(refused.headers['www-authenticate'], undefined)
    assert.deepEqual(refused.json.quota, { limit: 25, refill: 'none', resetsAt: null })
  })

  it('a daily quota answers Retry-After at the next UTC midnight', async () => {
    const { token } = await issue(server, '--quota', '1', '--quota-refill', 'daily')
    assert.equal((await me(server, token)).status, 200)
    const refused = await me(server, token)
    assert.equal(refused.status, 429)
    const now = server.clock.now()
    const midnight = Math.floor(now / 86_400_000) * 86_400_000 + 86_400_000
    const retryAfter = Number(refused.headers['retry-after'])
    assert.ok(Math.abs(retryAfter - Math.ceil((midnight - now) / 1000)) <= 2, String(retryAfter))
    assert.equal(
      (refused.json.quota as { resetsAt: string }).resetsAt,
      new Date(midnight).toISOString(),
    )
  })

  it('rotating an exhausted key gives its replacement no fresh quota', async () => {
    const { token, id } = await issue(server, '--quota', '3')
    assert.deepEqual(tally(await burst(server, token, 5)), { 200: 3, 429: 2 })
    const rotated = await server.cli('pat', 'rotate', id, '--json')
    assert.equal(rotated.code, 0, rotated.stderr)
    const replacement = JSON.parse(rotated.stdout) as Issued
    const answer = await me(server, replacement.token)
    assert.equal(answer.status, 429)
    assert.equal(answer.json.code, 'quota_exhausted')
  })

  it('editing something else (the name) leaves the count where it was', async () => {
    const { token, id } = await issue(server, '--quota', '2')
    assert.deepEqual(tally(await burst(server, token, 2)), { 200: 2 })
    assert.equal((await server.cli('pat', 'edit', id, '--name', 'fresh-start')).code, 0)
    // The edit reaches the server through the store (other process: data_version polling).
    await new Promise((resolve) => setTimeout(resolve, 700))
    assert.equal((await me(server, token)).status, 429)
  })

  it('lowering a quota below what was used refuses the key at once', async () => {
    const { token, id } = await issue(server, '--quota', '1000')
    assert.deepEqual(tally(await burst(server, token, 5)), { 200: 5 })
    assert.equal((await server.cli('pat', 'edit', id, '--quota', '4')).code, 0)
    const started = performance.now()
    let status = 200
    while (status === 200 && performance.now() - started < 3000) {
      status = (await me(server, token)).status
    }
    assert.equal(status, 429)
    assert.ok(performance.now() - started < 1000, `${Math.round(performance.now() - started)} ms`)
  })
})

describe('attack: a restart refills nothing (the count is in the store)', () => {
  it('an exhausted key is still exhausted after the server restarts on its data', async () => {
    const first = await startTestServer({ rateLimit: { enabled: false } })
    let second: TestServer | undefined
    try {
      const { token } = await issue(first, '--quota', '4')
      assert.deepEqual(tally(await burst(first, token, 6)), { 200: 4, 429: 2 })
      await first.close()
      second = await startTestServer({ rateLimit: { enabled: false }, dataDir: first.dataDir })
      const answer = await me(second, token)
      assert.equal(answer.status, 429)
      assert.equal(answer.json.code, 'quota_exhausted')
    } finally {
      await second?.close()
      await first.close()
    }
  })

  it('uses reserved and not spent are given back at a graceful shutdown', async () => {
    // A quota of 10,000 reserves blocks of 100: after 3 requests, 97 are reserved unspent.
    const first = await startTestServer({ rateLimit: { enabled: false } })
    let second: TestServer | undefined
    try {
      const { token, id } = await issue(first, '--quota', '10000')
      assert.deepEqual(tally(await burst(first, token, 3)), { 200: 3 })
      await first.close()
      second = await startTestServer({ rateLimit: { enabled: false }, dataDir: first.dataDir })
      const shown = await second.cli('pat', 'show', id, '--json')
      assert.equal(
        (JSON.parse(shown.stdout) as { quotaUsage: { used: number } }).quotaUsage.used,
        3,
      )
    } finally {
      await second?.close()
      await first.close()
    }
  })
})

describe('attack: a request refused for its rate spends no use', () => {
  it('429 rate_limited first, then the quota still has its uses', async () => {
    const server = await startTestServer({
      rateLimit: { perToken: { max: 2, windowSec: 3600 }, failedAuth: { max: 0 } },
    })
    try {
      const { token, id } = await issue(server, '--quota', '3')
      const statuses = await burst(server, token, 6)
      assert.deepEqual(tally(statuses), { 200: 2, 429: 4 })
      const limited = await me(server, token)
      assert.equal(limited.json.code, 'rate_limited')
      // A quota of 3 is reserved one use at a time: the count is exactly what was served.
      const shown = await server.cli('pat', 'show', id, '--json')
      const usage = (
        JSON.parse(shown.stdout) as { quotaUsage: { used: number; remaining: number } }
      ).quotaUsage
      assert.deepEqual([usage.used, usage.remaining], [2, 1])
    } finally {
      await server.close()
    }
  })
})

describe('attack: a spent quota does not use up the rate limit', () => {
  it('every request after the quota is spent is quota_exhausted with the refill time, never rate_limited', async () => {
    // The issue's case: a 10 s window whose slots the refused requests used to spend, so the
    // next call got 429 rate_limited with Retry-After: 10 instead of the refill time.
    const server = await startTestServer({
      rateLimit: { perToken: { max: 5, windowSec: 10 }, failedAuth: { max: 0 } },
    })
    try {
      const { token } = await issue(server, '--quota', '3', '--quota-refill', 'daily')
      for (let i = 0; i < 3; i++) assert.equal((await me(server, token)).status, 200)
      const now = server.clock.now()
      const midnight = Math.floor(now / 86_400_000) * 86_400_000 + 86_400_000
      for (let i = 0; i < 10; i++) {
        const refused = await me(server, token)
        assert.equal(refused.status, 429)
        assert.equal(refused.json.code, 'quota_exhausted', `request ${i + 4}`)
        const retryAfter = Number(refused.headers['retry-after'])
        assert.ok(
          Math.abs(retryAfter - Math.ceil((midnight - now) / 1000)) <= 5,
          String(retryAfter),
        )
      }
    } finally {
      await server.close()
    }
  })
})
