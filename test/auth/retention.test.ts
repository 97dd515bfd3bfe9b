import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, it, mock } from 'node:test'
import { pruneExpired, startRetention } from '../../src/auth/retention.ts'
import { loadConfig } from '../../src/config/load.ts'
import { openSqliteStore, type SqliteStore } from '../../src/stores/sqlite.ts'
import type { StoredAuditEvent, UsageRow } from '../../src/stores/store.ts'
import { testClock } from '../helpers/clock.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const NOW = Date.UTC(2026, 5, 1)
const HOUR = 3_600_000
const DAY = 86_400_000

const settings = (overrides: Record<string, unknown>) =>
  loadConfig({ env: {}, overrides: { server: { plainHttp: true }, ...overrides } })

function row(resolution: UsageRow['resolution'], bucketStart: number, subject = 'k'): UsageRow {
  return {
    scope: 'key',
    subject,
    resolution,
    bucketStart,
    tenantId: 'acme',
    allowed: 1,
    unauthorized: 0,
    forbidden: 0,
    limited: 0,
  }
}

function event(id: string, time: number): StoredAuditEvent {
  return {
    id,
    time,
    type: 'pat.issued',
    tenantId: 'acme',
    actor: 'cli:x',
    outcome: 'ok',
    clientAddress: null,
    requestId: null,
    details: {},
  }
}

describe('retention of usage buckets and the audit log', () => {
  let store: SqliteStore

  before(async () => {
    store = openSqliteStore(join(tempDir('tg-retention-'), 'db.sqlite'))
    await store.migrate()
  })
  after(() => store.close())

  it('deletes each resolution past its retention and audit events past audit.retentionDays', async () => {
    await store.addUsage([
      row('minute', NOW - 49 * HOUR),
      row('minute', NOW - 47 * HOUR),
      row('hour', NOW - 32 * DAY),
      row('hour', NOW - 30 * DAY),
      row('day', NOW - 401 * DAY),
      row('day', NOW - 399 * DAY),
    ])
    await store.appendAudit([event('old', NOW - 91 * DAY), event('new', NOW - 89 * DAY)], {
      queue: false,
    })
    await store.appendAudit([event('undelivered', NOW - 200 * DAY)])
    const revocation = {
      issuer: 'https://idp.test/',
      kind: 'sub',
      issuedBefore: NOW - 2 * DAY,
      reason: null,
      createdAt: NOW - 2 * DAY,
      createdBy: null,
    } as const
    await store.putJwtRevocation({ ...revocation, id: 'expired', value: 'a', expiresAt: NOW })
    await store.putJwtRevocation({ ...revocation, id: 'live', value: 'b', expiresAt: NOW + 1 })
    const config = settings({ audit: { retentionDays: 90 } })
    const pruned = await pruneExpired(store, config, NOW)
    assert.deepEqual(pruned, {
      usage: { minute: 1, hour: 1, day: 1 },
      audit: 1,
      jwtRevocations: 1,
    })
    assert.deepEqual(
      (await store.listJwtRevocations(0)).map((r) => r.id),
      ['live'],
    )
    const left = await store.admin.searchAudit({}, { limit: 10 })
    assert.deepEqual(left.items.map((e) => e.id).sort(), ['new', 'undelivered'])
    for (const [resolution, kept] of [
      ['minute', NOW - 47 * HOUR],
      ['hour', NOW - 30 * DAY],
      ['day', NOW - 399 * DAY],
    ] as const) {
      const rows = await store.readUsage({
        scope: 'key',
        subject: 'k',
        resolution,
        since: 0,
        until: NOW,
      })
      assert.deepEqual(
        rows.map((r) => r.bucketStart),
        [kept],
        resolution,
      )
    }
  })

  it('audit.retentionDays 0 keeps every event; many rows are deleted in batches', async () => {
    await store.appendAudit([event('ancient', 0)], { queue: false })
    const many = Array.from({ length: 12_000 }, (_, i) =>
      row('minute', NOW - 100 * HOUR - i * 60_000, 'bulk'),
    )
    await store.addUsage(many)
    const pruned = await pruneExpired(store, settings({}), NOW)
    assert.equal(pruned.audit, 0)
    assert.equal(pruned.usage.minute, 12_000)
    assert.ok(
      (await store.admin.searchAudit({}, { limit: 50 })).items.some((e) => e.id === 'ancient'),
    )
  })

  it('runs a minute after start, then hourly; close stops it', async () => {
    mock.timers.enable({ apis: ['setTimeout', 'setInterval'] })
    try {
      const runs: number[] = []
      const fake = {
        pruneUsage: async () => {
          runs.push(1)
          return 0
        },
        pruneAudit: async () => 0,
      }
      const retention = startRetention(fake, settings({}), testClock(NOW), {
        info() {},
        warn() {},
      })
      mock.timers.tick(59_999)
      assert.equal(runs.length, 0)
      mock.timers.tick(1)
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(runs.length, 3, 'one prune per resolution')
      mock.timers.tick(HOUR)
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(runs.length, 6)
      await retention.close()
      mock.timers.tick(HOUR)
      assert.equal(runs.length, 6)
    } finally {
      mock.timers.reset()
    }
  })
})
