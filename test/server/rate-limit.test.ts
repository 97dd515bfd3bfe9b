import assert from 'node:assert/strict'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { after, before, describe, it, type TestContext } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { Redis } from 'ioredis'
import { type AuthContext, createAuthContext } from '../../src/auth/auth-context.ts'
import { loadConfig } from '../../src/config/load.ts'
import { issuePat } from '../../src/core/pat.ts'
import { systemClock } from '../../src/core/ports.ts'
import { mintDevJwt } from '../../src/dev/issuer.ts'
import { seedDevData } from '../../src/dev/seed.ts'
import { createLogger } from '../../src/logger.ts'
import { buildServer } from '../../src/server/server.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import type { Store } from '../../src/stores/store.ts'
import { type RedisServer, skipReason, startRedis } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'

/** One store (a SQLite data directory in dev mode) that one or more app instances share. */
interface Backend {
  readonly dataDir: string
  readonly store: Store
  /** A PAT of `tenantId` (created with no permissions unless given). */
  pat(tenantId?: string, ...permissions: string[]): Promise<string>
  jwt(subject: string, tenantId?: string): Promise<string>
  /** The id of a PAT made by `pat()`. */
  idOf(token: string): string
}

interface App {
  inject(
    token: string | undefined,
    options?: { url?: string; remoteAddress?: string; tenant?: string },
  ): Promise<LightMyRequestResponse>
  readonly logs: string[]
  /** How many times the auth core was asked to verify a credential. */
  readonly verifications: () => number
  readonly auth: AuthContext
}

async function openBackend(t: TestContext): Promise<Backend> {
  const dataDir = tempDir('tg-rl-')
  const store = openSqliteStore(join(dataDir, 'tokengate.db'))
  await store.migrate()
  await seedDevData(store, dataDir, Date.now())
  await store.createTenant({ id: 'other', name: 'Other' }, Date.now())
  t.after(() => store.close())
  let n = 0
  const ids = new Map<string, string>()
  return {
    dataDir,
    store,
    async pat(tenantId = 'demo', ...permissions) {
      const now = Date.now()
      const { token, record } = issuePat({
        tenantId,
        subject: `svc-${++n}`,
        name: `pat ${n}`,
        permissions,
        expiresAt: now + 86_400_000,
        now,
      })
      await store.insertPat(record)
      ids.set(token, record.id)
      return token
    },
    idOf: (token) => ids.get(token) as string,
    jwt: (subject, tenantId = 'demo') =>
      mintDevJwt(dataDir, { tenantId, subject, permissions: [] }),
  }
}

async function startApp(
  t: TestContext,
  backend: Backend,
  overrides: Record<string, unknown>,
): Promise<App> {
  const logs: string[] = []
  const logger = createLogger(
    'info',
    new Writable({
      write(chunk, _encoding, done) {
        logs.push(...String(chunk).split('\n').filter(Boolean))
        done()
      },
    }),
  )
  const config = loadConfig({
    env: {},
    overrides: { dev: true, dataDir: backend.dataDir, server: { plainHttp: true }, ...overrides },
  })
  const real = await createAuthContext(config, backend.store, systemClock, logger)
  let verifications = 0
  const auth: AuthContext = {
    ...real,
    authenticate: (input) => {
      verifications++
      return real.authenticate(input)
    },
  }
  const app = await buildServer({ config, auth, logger })
  t.after(async () => {
    await app.close()
    await real.close()
  })
  return {
    logs,
    auth: real,
    verifications: () => verifications,
    inject: (token, options = {}) =>
      app.inject({
        url: options.url ?? '/api/v1/me',
        remoteAddress: options.remoteAddress ?? '192.0.2.1',
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(options.tenant ? { 'x-tenant-id': options.tenant } : {}),
        },
      }),
  }
}

/** Parses `"name";k=v;k=v` (an sf-list of one Item: String with Integer parameters). */
function parseField(value: unknown): { name: string; params: Record<string, number> } {
  assert.equal(typeof value, 'string', 'header present')
  const match = /^"([a-z-]+)"((?:;[a-z]+=\d+)+)$/.exec(value as string)
  assert.ok(match, `structured field syntax: ${String(value)}`)
  const params: Record<string, number> = {}
  for (const part of (match[2] as string).slice(1).split(';')) {
    const [key, number] = part.split('=') as [string, string]
    assert.equal(params[key], undefined, `parameter ${key} given once`)
    params[key] = Number(number)
  }
  return { name: match[1] as string, params }
}

/** The RateLimit pair of a response, checked for consistency (same policy in both). */
function rateLimitOf(response: LightMyRequestResponse) {
  const policy = parseField(response.headers['ratelimit-policy'])
  const current = parseField(response.headers.ratelimit)
  assert.equal(current.name, policy.name, 'one policy per response, in both fields')
  return {
    name: policy.name,
    q: policy.params.q,
    w: policy.params.w,
    r: current.params.r,
    t: current.params.t,
  }
}

function assertRateLimited(response: LightMyRequestResponse, policy: string) {
  assert.equal(response.statusCode, 429, response.body)
  assert.match(String(response.headers['content-type']), /^application\/problem\+json/)
  const body = response.json()
  assert.equal(body.code, 'rate_limited')
  assert.equal(body.status, 429)
  assert.equal(body.type, 'https://tokengate.dev/problems/rate_limited')
  assert.equal(body.policy, policy)
  assert.equal(typeof body.requestId, 'string')
  const retryAfter = Number(response.headers['retry-after'])
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1, 'Retry-After: delay-seconds')
  const limit = rateLimitOf(response)
  assert.equal(limit.name, policy)
  assert.equal(limit.r, 0)
  assert.equal(limit.t, retryAfter, 'RateLimit t agrees with Retry-After')
  return limit
}

const statuses = (responses: readonly LightMyRequestResponse[]) =>
  responses.map((r) => r.statusCode)

async function times(n: number, call: () => Promise<LightMyRequestResponse>) {
  const out: LightMyRequestResponse[] = []
  for (let i = 0; i < n; i++) out.push(await call())
  return out
}

describe('rate limits (in-process counters)', () => {
  it('per token: 429 rate_limited after the quota, with Retry-After and one RateLimit pair', async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, { rateLimit: { perToken: { max: 3, windowSec: 60 } } })
    const token = await backend.pat()
    const ok = await times(3, () => app.inject(token))
    assert.deepEqual(statuses(ok), [200, 200, 200])
    assert.deepEqual(
      ok.map((r) => rateLimitOf(r)),
      [2, 1, 0].map((r) => ({ name: 'per-token', q: 3, w: 60, r, t: 60 })),
    )
    const limited = await app.inject(token)
    const limit = assertRateLimited(limited, 'per-token')
    assert.deepEqual([limit.q, limit.w], [3, 60])
    assert.equal(limited.headers['cache-control'], 'no-store')
    assert.ok(!limited.body.includes(token), 'the token is never echoed')

    // The limit is the token's, not the address's or the tenant's.
    assert.equal((await app.inject(await backend.pat())).statusCode, 200)
  })

  it('a JWT is limited by issuer, tenant and subject: a refreshed JWT shares the allowance', async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, { rateLimit: { perToken: { max: 2 } } })
    const first = await backend.jwt('alice')
    const refreshed = await backend.jwt('alice')
    assert.notEqual(first, refreshed)
    assert.equal((await app.inject(first, { tenant: 'demo' })).statusCode, 200)
    assert.equal((await app.inject(refreshed, { tenant: 'demo' })).statusCode, 200)
    assertRateLimited(await app.inject(refreshed, { tenant: 'demo' }), 'per-token')
    const bob = await backend.jwt('bob')
    assert.equal((await app.inject(bob, { tenant: 'demo' })).statusCode, 200)
  })

  it('per tenant: two tokens of one tenant share its quota; another tenant is unaffected', async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, {
      rateLimit: { perToken: { max: 100 }, perTenant: { max: 4, windowSec: 30 } },
    })
    const [a, b, other] = [await backend.pat(), await backend.pat(), await backend.pat('other')]
    const ok = [await app.inject(a), await app.inject(b), await app.inject(a), await app.inject(b)]
    assert.deepEqual(statuses(ok), [200, 200, 200, 200])
    // The most constraining policy is the one shown: per-tenant (r=0) over per-token (r=98).
    assert.deepEqual(rateLimitOf(ok[3] as LightMyRequestResponse), {
      name: 'per-tenant',
      q: 4,
      w: 30,
      r: 0,
      t: 30,
    })
    assertRateLimited(await app.inject(a), 'per-tenant')
    assertRateLimited(await app.inject(b), 'per-tenant')
    assert.equal((await app.inject(other)).statusCode, 200)
  })

  it("a token over its own limit does not spend its tenant's allowance", async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, {
      rateLimit: { perToken: { max: 2 }, perTenant: { max: 4 } },
    })
    const [runaway, quiet] = [await backend.pat(), await backend.pat()]
    const burst = await times(10, () => app.inject(runaway))
    assert.deepEqual(statuses(burst), [200, 200, ...Array(8).fill(429)])
    assert.deepEqual(statuses(await times(2, () => app.inject(quiet))), [200, 200])
  })

  it('failed authentications per address: 401 up to the limit, then 429 without verification; other addresses unaffected', async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, { rateLimit: { failedAuth: { max: 3, windowSec: 60 } } })
    const attacker = '198.51.100.7'
    const failures = await times(3, () => app.inject('garbage', { remoteAddress: attacker }))
    assert.deepEqual(statuses(failures), [401, 401, 401])
    assert.deepEqual(
      failures.map((r) => rateLimitOf(r).r),
      [2, 1, 0],
      '401s show how many failures remain',
    )
    assert.ok(app.logs.some((l) => l.includes('failed-authentication limit reached')))

    const before = app.verifications()
    const throttled = await app.inject('garbage-2', { remoteAddress: attacker })
    assertRateLimited(throttled, 'failed-auth')
    assertRateLimited(await app.inject(undefined, { remoteAddress: attacker }), 'failed-auth')
    assert.equal(app.verifications(), before, 'no verification once over the limit')

    // A legitimate holder at another address: unaffected, and its own failures count apart.
    const valid = await backend.pat()
    assert.equal((await app.inject(valid, { remoteAddress: '203.0.113.5' })).statusCode, 200)
    assert.equal((await app.inject('bad', { remoteAddress: '203.0.113.5' })).statusCode, 401)
    // Endpoints outside the protected prefix stay reachable from the throttled address.
    const health = await app.inject(undefined, { url: '/healthz', remoteAddress: attacker })
    assert.equal(health.statusCode, 200)
  })

  it('same address as the attacker: a credential this instance verified before passes, an unseen one waits', async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, { rateLimit: { failedAuth: { max: 2 } } })
    const shared = '198.51.100.20'
    const holder = await backend.pat()
    assert.equal((await app.inject(holder, { remoteAddress: shared })).statusCode, 200)
    await times(2, () => app.inject('guess', { remoteAddress: shared }))
    assertRateLimited(await app.inject('guess', { remoteAddress: shared }), 'failed-auth')

    const passed = await app.inject(holder, { remoteAddress: shared })
    assert.equal(passed.statusCode, 200, 'the known holder is not locked out')
    const unseen = await backend.pat()
    assertRateLimited(await app.inject(unseen, { remoteAddress: shared }), 'failed-auth')
    // Known credentials still go through full authentication: revocation applies at once.
    await backend.store.revokePat(backend.idOf(holder), Date.now())
    app.auth.lookups.clear()
    assert.equal((await app.inject(holder, { remoteAddress: shared })).statusCode, 401)
    // ...and a credential that failed loses its pass: it waits like any other.
    assertRateLimited(await app.inject(holder, { remoteAddress: shared }), 'failed-auth')
  })

  it('IPv6 clients are counted per /64', async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, { rateLimit: { failedAuth: { max: 2 } } })
    await app.inject('x', { remoteAddress: '2001:db8:1:2::1' })
    await app.inject('x', { remoteAddress: '2001:db8:1:2::ffff' })
    assertRateLimited(
      await app.inject('x', { remoteAddress: '2001:db8:1:2:abcd::9' }),
      'failed-auth',
    )
    assert.equal((await app.inject('x', { remoteAddress: '2001:db8:1:3::1' })).statusCode, 401)
  })

  it('403s are not failed authentications', async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, { rateLimit: { failedAuth: { max: 1 } } })
    const noPermissions = await backend.pat()
    const forbidden = await times(3, () => app.inject(noPermissions, { url: '/api/v1/tokens' }))
    assert.deepEqual(statuses(forbidden), [403, 403, 403])
    assert.equal((await app.inject('garbage')).statusCode, 401, 'first failure from the address')
    assertRateLimited(await app.inject('garbage'), 'failed-auth')
  })

  it('on by default with the documented quotas; `enabled: false` and `max: 0` switch limits off', async (t) => {
    const backend = await openBackend(t)
    const defaults = await startApp(t, backend, {})
    const token = await backend.pat()
    assert.deepEqual(rateLimitOf(await defaults.inject(token)), {
      name: 'per-token',
      q: 1200,
      w: 60,
      r: 1199,
      t: 60,
    })
    assert.equal(rateLimitOf(await defaults.inject('nope')).q, 60)

    const off = await startApp(t, backend, { rateLimit: { enabled: false, perToken: { max: 1 } } })
    const r = await times(3, () => off.inject(token))
    assert.deepEqual(statuses(r), [200, 200, 200])
    assert.equal(r[0]?.headers.ratelimit, undefined)

    const noTokenLimit = await startApp(t, backend, {
      rateLimit: { perToken: { max: 0 }, perTenant: { max: 0 }, failedAuth: { max: 1 } },
    })
    assert.deepEqual(statuses(await times(3, () => noTokenLimit.inject(token))), [200, 200, 200])
    assert.deepEqual(
      statuses(await times(2, () => noTokenLimit.inject('bad'))),
      [401, 429],
      'the other policy stays on',
    )
  })
})

describe('rate limits shared through Redis', { skip: skipReason('redis') }, () => {
  let redis: RedisServer
  before(async () => {
    redis = await startRedis()
  })
  after(() => redis?.stop())

  it('two instances share the counters: the sum of requests across both is limited', async (t) => {
    const backend = await openBackend(t)
    const rateLimit = {
      perToken: { max: 5 },
      failedAuth: { max: 2 },
      redisPrefix: `t1:${Date.now()}:`,
    }
    const a = await startApp(t, backend, { redisUrl: redis.url, rateLimit })
    const b = await startApp(t, backend, { redisUrl: redis.url, rateLimit })
    const token = await backend.pat()
    const responses: LightMyRequestResponse[] = []
    for (let i = 0; i < 4; i++) {
      responses.push(await a.inject(token), await b.inject(token))
    }
    assert.deepEqual(statuses(responses), [200, 200, 200, 200, 200, 429, 429, 429])
    assertRateLimited(responses[7] as LightMyRequestResponse, 'per-token')

    // Failed authentications counted on A throttle the address on B.
    await a.inject('bad', { remoteAddress: '198.51.100.99' })
    await a.inject('bad', { remoteAddress: '198.51.100.99' })
    assertRateLimited(await b.inject('bad', { remoteAddress: '198.51.100.99' }), 'failed-auth')

    const client = new Redis(redis.url)
    t.after(() => client.disconnect())
    const keys = await client.keys(`${rateLimit.redisPrefix}*`)
    assert.ok(keys.some((k) => k.startsWith(`${rateLimit.redisPrefix}per-token:pat:`)))
    assert.ok(keys.some((k) => k.startsWith(`${rateLimit.redisPrefix}failed-auth:`)))
    assert.ok(
      keys.every((k) => !k.includes(token) && !k.includes(token.slice(4, 20))),
      'no raw token in Redis',
    )
  })

  it('Redis unreachable at start-up: the server starts, warns, and limits in-process', async (t) => {
    const backend = await openBackend(t)
    const app = await startApp(t, backend, {
      redisUrl: 'redis://127.0.0.1:1',
      rateLimit: { perToken: { max: 2 } },
    })
    assert.ok(app.logs.some((l) => l.includes('"level":40') && l.includes('Redis')))
    const token = await backend.pat()
    assert.deepEqual(statuses(await times(3, () => app.inject(token))), [200, 200, 429])
  })

  it('Redis paused (commands time out): no 5xx, one warning, in-process limiting, then recovery', async (t) => {
    const backend = await openBackend(t)
    const prefix = `t3:${Date.now()}:`
    const app = await startApp(t, backend, {
      redisUrl: redis.url,
      rateLimit: { perToken: { max: 10 }, redisPrefix: prefix, redisTimeoutMs: 100 },
    })
    const token = await backend.pat()
    assert.equal((await app.inject(token)).statusCode, 200)
    const admin = new Redis(redis.url)
    t.after(() => admin.disconnect())
    await admin.call('CLIENT', 'PAUSE', '1500', 'ALL')

    // During the pause the Redis count is out of reach: an in-process window starts at 0.
    const during = await times(12, () => app.inject(token))
    assert.deepEqual(statuses(during), [...Array(10).fill(200), 429, 429])
    const warnings = app.logs.filter((l) => l.includes('Redis unavailable'))
    assert.equal(warnings.length, 1, 'one warning per outage')

    await new Promise((resolve) => setTimeout(resolve, 1_700))
    // Back on Redis: the in-process count (12) would answer 429; Redis holds the request made
    // before the pause (and any timed-out increment Redis ran late), so this one passes.
    const resumed = await app.inject(token)
    assert.equal(resumed.statusCode, 200)
    assert.ok(Number(rateLimitOf(resumed).r) <= 8, 'the pre-pause request is still counted')
    assert.ok(app.logs.some((l) => l.includes('Redis is back')))
  })

  it('Redis stopped mid-run: no 5xx, a warning, limiting continues in-process', async (t) => {
    const own = await startRedis()
    t.after(() => own.stop())
    const backend = await openBackend(t)
    const app = await startApp(t, backend, {
      redisUrl: own.url,
      rateLimit: { perToken: { max: 3 }, failedAuth: { max: 2 } },
    })
    const token = await backend.pat()
    assert.equal((await app.inject(token)).statusCode, 200)
    const ready = await app.inject(undefined, { url: '/readyz' })
    assert.deepEqual(
      [ready.statusCode, ready.json().status, ready.json().checks.redis],
      [200, 'ready', 'connected'],
    )
    await own.stop()

    const after = [
      ...(await times(5, () => app.inject(token))),
      ...(await times(3, () => app.inject('bad', { remoteAddress: '198.51.100.50' }))),
    ]
    assert.ok(
      after.every((r) => r.statusCode < 500),
      `no 5xx: ${statuses(after).join(',')}`,
    )
    assert.deepEqual(statuses(after), [200, 200, 200, 429, 429, 401, 401, 429])
    assert.equal(app.logs.filter((l) => l.includes('Redis unavailable')).length, 1)
    // Degraded, not unready: every instance shares this Redis (health.ts). The client may
    // learn of the closed connection a moment after the fallback began: up to 2 s.
    let degraded = await app.inject(undefined, { url: '/readyz' })
    for (let i = 0; i < 40 && degraded.json().checks.redis === 'connected'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      degraded = await app.inject(undefined, { url: '/readyz' })
    }
    assert.deepEqual(
      [degraded.statusCode, degraded.json().status, degraded.json().checks.redis],
      [200, 'degraded', 'unavailable'],
    )
    const warning = app.logs.find((l) => l.includes('Redis unavailable')) as string
    assert.doesNotMatch(warning, /"stack"/, 'an expected warning carries no stack trace')
  })
})
