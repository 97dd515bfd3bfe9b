/**
 * What an operator reads when tokengate starts: one line for the store (Postgres
 * user@host:port/database, never the password), one for the rate-limit counters (Redis
 * host:port, never its password), one for the gateway's upstream, and one per listener with
 * its real scheme and role. Seen before: the admin listener logged as http:// while it
 * served HTTPS, the decision listener as "Server listening at", the metrics listener and the
 * store not at all.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { request } from 'node:https'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { after, before, describe, test } from 'node:test'
import { countersLine, listenAs, storeLine, upstreamLine } from '../../src/startup.ts'
import { launchTokengate } from '../helpers/launch.ts'
import {
  type PostgresServer,
  type RedisServer,
  skipReason,
  startPostgres,
  startRedis,
} from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const config = (extra: Record<string, unknown>) =>
  ({ dataDir: '/srv/tg', rateLimit: { enabled: true }, ...extra }) as never

describe('start-up lines', () => {
  test('the store: the SQLite file, or Postgres without its password or query', () => {
    assert.equal(storeLine(config({})).msg, 'store: sqlite /srv/tg/tokengate.db')
    const pg = storeLine(
      config({ databaseUrl: 'postgres://tg:s3cr%40t@db.internal:6543/tokens?sslmode=require' }),
    )
    assert.equal(pg.msg, 'store: postgres tg@db.internal:6543/tokens')
    assert.doesNotMatch(JSON.stringify(pg), /s3cr|sslmode/)
  })

  test('the counters: Redis without its password, in-process, or off', () => {
    const redis = countersLine(config({ redisUrl: 'rediss://:hunter2@cache.internal:6380/2' }))
    assert.equal(
      redis.msg,
      'rate limits: redis cache.internal:6380/2 (shared by every instance, TLS)',
    )
    assert.doesNotMatch(JSON.stringify(redis), /hunter2/)
    assert.match(countersLine(config({})).msg, /in-process/)
    assert.match(countersLine(config({ rateLimit: { enabled: false } })).msg, /off/)
  })

  test('the upstream without a user or password', () => {
    const line = upstreamLine(
      config({ gateway: { upstream: 'https://svc:pw@api.internal:8080/inner' } }),
    )
    assert.equal(
      line?.msg,
      'gateway upstream: https://api.internal:8080/inner (other /api/v1 requests are proxied there; no policy file: any valid token)',
    )
    assert.equal(upstreamLine(config({})), undefined)
  })

  test('with gateway.policyStore the line names the stored policy, never "no policy file"', () => {
    const line = upstreamLine(
      config({ gateway: { upstream: 'http://127.0.0.1:3000', policyStore: true } }),
    )
    assert.doesNotMatch(line?.msg ?? '', /no policy file/)
    assert.match(
      line?.msg ?? '',
      /policy: the stored one \(gateway\.policyStore; tokengate policy show\)/,
    )
  })

  test('a listener that cannot start is named with its settings; other errors keep their text', async () => {
    const taken = Object.assign(
      new Error('listen EADDRINUSE: address already in use 0.0.0.0:9443'),
      {
        code: 'EADDRINUSE',
        syscall: 'listen',
        address: '0.0.0.0',
        port: 9443,
      },
    )
    await assert.rejects(
      listenAs('admin', () => Promise.reject(taken)),
      {
        message:
          'admin listener (admin.host, admin.port) cannot listen on 0.0.0.0:9443: address already in use',
      },
    )
    await assert.rejects(
      listenAs('decision', () => Promise.reject(new Error('boom'))),
      {
        message: 'decision listener (decision.host, decision.port) boom',
      },
    )
  })
})

describe('serve with Postgres, Redis, gateway, decision, admin and metrics', {
  skip: skipReason('postgres') || skipReason('redis'),
}, () => {
  let pg: PostgresServer
  let redis: RedisServer
  const lines: { msg: string }[] = []
  let launched: Awaited<ReturnType<typeof launchTokengate>>
  const dataDir = tempDir('tg-startup-')
  before(async () => {
    ;[pg, redis] = await Promise.all([startPostgres(), startRedis()])
    // trust authentication: the password is accepted and ignored, and must never be logged.
    const databaseUrl = (await pg.createDatabase()).replace('postgres@', 'postgres:pg-s3cret@')
    const sink = new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line))
        done()
      },
    })
    launched = await launchTokengate(
      {
        dev: true,
        dataDir,
        databaseUrl,
        redisUrl: redis.url.replace('redis://', 'redis://:redis-s3cret@'),
        server: { host: '127.0.0.1', port: 0 },
        log: { level: 'info' },
        gateway: { upstream: 'http://127.0.0.1:9' },
        decision: { host: '127.0.0.1', port: 0, proxy: 'nginx' },
        admin: { enabled: true, host: '127.0.0.1', port: 0 },
        metrics: { enabled: true, host: '127.0.0.1', port: 0 },
      },
      { logDestination: sink },
    )
  })
  after(async () => {
    await launched?.close()
    await Promise.all([pg?.stop(), redis?.stop()])
  })

  test('each component in one line, every listener with its real scheme and role', () => {
    const messages = lines.map((line) => line.msg)
    const origin = (url: string | undefined) => new URL(url as string).origin
    const dbPort = new URL(pg.url).port
    const expected = [
      new RegExp(`^store: postgres postgres@127\\.0\\.0\\.1:${dbPort}/t_[0-9a-f]+$`),
      new RegExp(
        `^rate limits: redis 127\\.0\\.0\\.1:${redis.port}/0 \\(shared by every instance\\)$`,
      ),
      /^gateway upstream: http:\/\/127\.0\.0\.1:9 /,
      new RegExp(`^listening on ${launched.url}: API \\(/api/v1, /healthz, /readyz\\)$`),
      new RegExp(`^listening on ${origin(launched.metricsUrl)}: metrics \\(/metrics\\)$`),
      new RegExp(
        `^listening on ${launched.adminUrl}: admin \\(console /admin/, admin API /admin/api/v1\\)$`,
      ),
      new RegExp(
        `^listening on ${launched.decisionUrl}: decision \\(forward-auth decisions for a proxy\\)$`,
      ),
    ]
    for (const pattern of expected) {
      assert.ok(
        messages.some((m) => pattern.test(m)),
        `${pattern}\n${messages.join('\n')}`,
      )
    }
    assert.match(launched.adminUrl as string, /^https:/)
    assert.doesNotMatch(messages.join('\n'), /Server listening at/)
    assert.doesNotMatch(JSON.stringify(lines), /s3cret/)
  })

  test('/readyz names the store, the change feed and Redis', async () => {
    const ca = readFileSync(join(dataDir, 'tls', 'dev-cert.pem'))
    const body = await new Promise<string>((resolve, reject) => {
      const req = request(`${launched.url}/readyz`, { ca }, (res) => {
        let text = ''
        res.on('data', (chunk: Buffer) => {
          text += chunk
        })
        res.on('end', () => resolve(text))
      })
      req.on('error', reject)
      req.end()
    })
    const ready = JSON.parse(body)
    assert.equal(ready.status, 'ready', body)
    assert.deepEqual(
      { store: ready.checks.store, changeFeed: ready.checks.changeFeed, redis: ready.checks.redis },
      { store: 'ok', changeFeed: 'connected', redis: 'connected' },
    )
  })
})
