/**
 * Keys as a product across two tokengate instances on one Postgres (and one Redis): a quota
 * is never exceeded by the two together; a key's own rate limit is shared through Redis;
 * edits and disables reach the other instance within a second; usage is counted
 * cluster-wide; and a GitHub leak report sent to one instance gets the PAT refused by both,
 * timed (the leak-to-revoke figure of issue #24).
 */
import assert from 'node:assert/strict'
import { generateKeyPairSync, sign } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { PostgresStore } from '../../src/stores/postgres.ts'
import { type RedisServer, skipReason, startRedis } from '../helpers/services.ts'
import {
  bearer,
  cli,
  type Instance,
  insertPat,
  issuePatWithCli,
  startTwoInstances,
  summarize,
  type TwoInstances,
  waitFor,
} from './cluster.ts'

const KEY_ID = 'bcb53661c06b4728e59d897fb6165d5c9cda0fd9cdf9d09ead458168deb7518c'
const BOUND_MS = 1000

describe('keys as a product on two instances (Postgres, Redis)', {
  skip: skipReason('postgres') || skipReason('redis'),
}, () => {
  let redis: RedisServer
  let two: TwoInstances
  let databaseUrl: string
  let admin: PostgresStore
  let a: Instance
  let b: Instance
  let dir: string
  const github = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })

  before(async () => {
    redis = await startRedis()
    dir = mkdtempSync(join(tmpdir(), 'tg-scale-keys-'))
    const keysFile = join(dir, 'github-keys.json')
    writeFileSync(
      keysFile,
      JSON.stringify({
        public_keys: [
          {
            key_identifier: KEY_ID,
            key: github.publicKey.export({ type: 'spki', format: 'pem' }),
            is_current: true,
          },
        ],
      }),
    )
    // A 5-minute cache: anything B applies within a second reached it through the change
    // feed. Rate limiting on (defaults far away), counted in Redis; usage flushed fast.
    const overrides = {
      auth: { lookupCacheTtlMs: 300_000 },
      redisUrl: redis.url,
      rateLimit: {
        enabled: true,
        perToken: { max: 100_000 },
        perTenant: { max: 1_000_000 },
        failedAuth: { max: 0 },
      },
      usage: { flushIntervalMs: 100 },
      leakReports: { githubKeysFile: keysFile },
    }
    two = await startTwoInstances({ overrides, tenants: [{ id: 'acme', name: 'acme' }] })
    ;({ databaseUrl, admin, a, b } = two)
  })

  after(async () => {
    await two?.close()
    await redis?.stop()
    if (dir) rmSync(dir, { recursive: true, force: true })
  })

  const issue = (...flags: string[]) => issuePatWithCli(databaseUrl, ...flags)

  const me = (instance: Instance, token: string) => instance.request('/api/v1/me', bearer(token))

  it('a quota of 60 spent through both instances at once serves exactly 60', async () => {
    const { token } = await issue('--quota', '60')
    const answers = await Promise.all(
      Array.from({ length: 150 }, (_, i) => me(i % 2 === 0 ? a : b, token)),
    )
    const served = answers.filter((r) => r.status === 200).length
    const exhausted = answers.filter((r) => r.json.code === 'quota_exhausted').length
    assert.deepEqual([served, exhausted], [60, 90])
  })

  it('a larger quota reserved in blocks is never exceeded; under-use stays within the bound', async (t) => {
    // 2,000 uses: blocks of 20 per instance; at most 19 unspent on each when it runs out.
    const { token, id } = await issue('--quota', '2000')
    let served = 0
    for (let round = 0; round < 25; round++) {
      const answers = await Promise.all(
        Array.from({ length: 100 }, (_, i) => me(i % 2 === 0 ? a : b, token)),
      )
      served += answers.filter((r) => r.status === 200).length
    }
    const count = (await admin.readQuota([id])).get(id)
    t.diagnostic(`quota 2000: served ${served}, reserved in the store ${count?.used}`)
    assert.ok(served <= 2000, `${served} served`)
    assert.ok(served >= 2000 - 2 * 19, `${served} served`)
    assert.equal(count?.used, 2000)
  })

  it("a key's own rate limit is shared by both instances through Redis", async () => {
    const { token } = await issue('--rate-limit', '10/1h')
    const statuses: number[] = []
    for (let i = 0; i < 16; i++) statuses.push((await me(i % 2 === 0 ? a : b, token)).status)
    assert.deepEqual(
      [statuses.filter((s) => s === 200).length, statuses.filter((s) => s === 429).length],
      [10, 6],
    )
  })

  it('an edit and a disable through the CLI reach the other instance within a second', async (t) => {
    const { token, id } = await issue('--permission', 'tokens:read')
    const tokens = (instance: Instance) => instance.request('/api/v1/tokens', bearer(token))
    assert.equal((await tokens(b)).status, 200)
    const editedAt = performance.now()
    const edited = cli(databaseUrl, 'pat', 'edit', id, '--permission', 'audit:read')
    const toForbidden = await waitFor(
      async () => (await tokens(b)).status === 403,
      'B sees the edit',
      {
        since: editedAt,
        timeoutMs: 5000,
      },
    )
    assert.equal((await edited).code, 0)
    const disabledAt = performance.now()
    const disabled = cli(databaseUrl, 'pat', 'disable', id)
    const toRefused = await waitFor(async () => (await me(b, token)).status === 401, 'B refuses', {
      since: disabledAt,
      timeoutMs: 5000,
    })
    assert.equal((await disabled).code, 0)
    // Timed from the CLI command's start (process start-up, connect, migrate check included).
    t.diagnostic(
      `CLI edit → 403 on B ${toForbidden.toFixed(0)} ms; CLI disable → 401 on B ${toRefused.toFixed(0)} ms (both from the command's start)`,
    )
    assert.equal((await me(a, token)).status, 401)
  })

  it('usage is counted cluster-wide: requests on A and on B add up in one series', async () => {
    const { token, id } = await issue()
    for (let i = 0; i < 6; i++) assert.equal((await me(i < 4 ? a : b, token)).status, 200)
    await waitFor(
      async () => {
        const out = await cli(databaseUrl, 'pat', 'usage', id, '--json')
        return (JSON.parse(out.stdout) as { totals: { allowed: number } }).totals.allowed === 6
      },
      'both instances flushed',
      { timeoutMs: 5000, intervalMs: 100 },
    )
  })

  it('a leak report sent to A gets the PAT refused by A and B within a second (timed, 20 reports)', async (t) => {
    const times: number[] = []
    for (let round = 0; round < 20; round++) {
      const leaked = await insertPat(admin, 'acme')
      assert.equal((await me(a, leaked.token)).status, 200)
      assert.equal((await me(b, leaked.token)).status, 200)
      const body = JSON.stringify([
        { token: leaked.token, type: 'tokengate_pat', url: '', source: 'content' },
      ])
      const since = performance.now()
      const response = await fetch(`${a.url}/leak-reports/github`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'github-public-key-identifier': KEY_ID,
          'github-public-key-signature': sign(
            'sha256',
            Buffer.from(body),
            github.privateKey,
          ).toString('base64'),
        },
        body,
      })
      assert.equal(response.status, 200, await response.text())
      const [onA, onB] = await Promise.all(
        [a, b].map((instance) =>
          waitFor(async () => (await me(instance, leaked.token)).status === 401, 'refused', {
            since,
            timeoutMs: 3000,
            intervalMs: 1,
          }),
        ),
      )
      times.push(Math.max(onA as number, onB as number))
    }
    const { median, max } = summarize(times)
    t.diagnostic(
      `leak report POSTed to A → PAT refused (401) on both A and B: median ${median.toFixed(1)} ms, max ${max.toFixed(1)} ms over ${times.length} reports`,
    )
    assert.ok(max < BOUND_MS, `max ${max} ms`)
  })
})
