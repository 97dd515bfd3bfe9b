import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { readUsageSeries, usageCsv, usageRange } from '../../src/auth/usage.ts'
import { openSqliteStore, type SqliteStore } from '../../src/stores/sqlite.ts'
import { openSqliteWithWriter } from '../../src/stores/sqlite-writer.ts'
import type { UsageRow } from '../../src/stores/store.ts'
import { usageRows } from '../../src/stores/usage-batch.ts'
import { createUsageWriter } from '../../src/stores/usage-writer.ts'
import { testClock } from '../helpers/clock.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { pat, T0 } from './contract.ts'

const T = Date.UTC(2026, 2, 10, 9, 59, 30)
const MINUTE = 60_000

describe('usage write-behind and reads (SQLite store)', () => {
  let store: SqliteStore

  before(async () => {
    store = openSqliteStore(join(tempDir('tg-usage-'), 'db.sqlite'))
    await store.migrate()
  })
  after(() => store.close())

  const series = (
    scope: 'key' | 'tenant' | 'all',
    subject: string,
    resolution: 'minute' | 'hour' | 'day',
    now: number,
  ) => readUsageSeries(store, scope, subject, { resolution }, now)

  it('counts per key, tenant and in all, into minute, hour and day buckets', async () => {
    const clock = testClock(T)
    const usage = createUsageWriter(store, { clock, flushIntervalMs: 0 })
    usage.count('allowed', 'acme', 'k1')
    usage.count('allowed', 'acme', 'k1')
    usage.count('forbidden', 'acme', 'k1')
    usage.count('allowed', 'acme', null)
    usage.count('unauthorized', null, null)
    clock.advance(MINUTE) // the next minute, the next hour
    usage.count('limited', 'acme', 'k1')
    await usage.flush()
    const minutes = await series('key', 'k1', 'minute', clock.now())
    const last = minutes.points.slice(-2)
    assert.deepEqual(
      last.map((p) => [new Date(p.start).toISOString(), p.allowed, p.forbidden, p.limited]),
      [
        ['2026-03-10T09:59:00.000Z', 2, 1, 0],
        ['2026-03-10T10:00:00.000Z', 0, 0, 1],
      ],
    )
    assert.deepEqual(minutes.totals, { allowed: 2, unauthorized: 0, forbidden: 1, limited: 1 })
    assert.equal(minutes.points.length, 60)
    const day = await series('tenant', 'acme', 'day', clock.now())
    assert.deepEqual(day.totals, { allowed: 3, unauthorized: 0, forbidden: 1, limited: 1 })
    const hours = await series('all', '', 'hour', clock.now())
    assert.deepEqual(
      hours.points.slice(-2).map((p) => p.allowed + p.unauthorized + p.forbidden + p.limited),
      [5, 1],
    )
    const top = await store.topKeys('acme', 'day', 0, clock.now() + 1, 5)
    assert.deepEqual(
      top.map((k) => [k.tokenId, k.tenantId]),
      [['k1', 'acme']],
    )
  })

  it('a flush that fails keeps its counts as they were for the next; later counts follow in their own write', async () => {
    const clock = testClock(T + 3_600_000 * 5)
    let failing = true
    const rows: UsageRow[][] = []
    const usage = createUsageWriter(
      {
        addUsage: async (batch) => {
          if (failing) throw new Error('down')
          rows.push([...usageRows(batch)])
        },
      },
      { clock, flushIntervalMs: 0 },
    )
    usage.count('allowed', 't', 'k')
    await assert.rejects(usage.flush())
    usage.count('allowed', 't', 'k')
    failing = false
    await usage.flush()
    // Never merged: the failed write is retried as it was, so a journal's replay of it cuts
    // the same slices (usage-journal.ts).
    const minutes = rows.map((write) =>
      write.find((r) => r.scope === 'key' && r.resolution === 'minute'),
    )
    assert.deepEqual(
      minutes.map((row) => row?.allowed),
      [1, 1],
    )
    assert.equal(rows[0]?.length, 9, 'three subjects × three resolutions, each bucket once')
    await usage.flush()
    assert.equal(rows.length, 2, 'nothing left to write')
  })

  it('many keys are written a slice at a time; a failing slice puts back only what was not stored', async () => {
    const clock = testClock(T + 3_600_000 * 7)
    const writes: UsageRow[][] = []
    let failAt = 2 // the third write fails once
    const usage = createUsageWriter(
      {
        addUsage: async (rows) => {
          if (writes.length === failAt) {
            failAt = -1
            throw new Error('down')
          }
          writes.push([...usageRows(rows)])
        },
      },
      { clock, flushIntervalMs: 0, subjectsPerWrite: 4 },
    )
    // 1 total + 1 tenant + 10 keys = 12 subjects: slices of 4, 4, 4.
    for (let i = 0; i < 10; i++) usage.count('allowed', 't', `k${i}`)
    await assert.rejects(usage.flush(), /down/)
    assert.deepEqual(
      writes.map((rows) => rows.length),
      [12, 12],
      'slices of four subjects, three rows each',
    )
    usage.count('allowed', 't', 'k9')
    await usage.flush()
    // The new minute's total, tenant and k9, then k6–k8 put back: six subjects, two slices.
    assert.equal(writes.length, 4)
    const allowed = (scope: string, subject: string) =>
      writes
        .flat()
        .filter((r) => r.scope === scope && r.subject === subject && r.resolution === 'minute')
        .reduce((sum, r) => sum + r.allowed, 0)
    // Each request counted exactly once across the writes: none lost, none written twice.
    assert.equal(allowed('all', ''), 11)
    assert.equal(allowed('tenant', 't'), 11)
    for (let i = 0; i < 9; i++) assert.equal(allowed('key', `k${i}`), 1, `k${i}`)
    assert.equal(allowed('key', 'k9'), 2)
    await usage.flush()
    assert.equal(writes.length, 4, 'nothing left to write')
  })

  it('uncount takes a request back (allowed, then refused by a route)', async () => {
    const clock = testClock(T + 3_600_000 * 9)
    const usage = createUsageWriter(store, { clock, flushIntervalMs: 0 })
    usage.count('allowed', 'beta', 'k9')
    usage.uncount('allowed', 'beta', 'k9')
    usage.count('forbidden', 'beta', 'k9')
    await usage.close()
    const day = await series('key', 'k9', 'day', clock.now())
    assert.deepEqual(day.totals, { allowed: 0, unauthorized: 0, forbidden: 1, limited: 0 })
  })

  it('is bounded: subjects per minute, and minutes kept while the store fails', async () => {
    const clock = testClock(T)
    const usage = createUsageWriter(
      { addUsage: async () => Promise.reject(new Error('down')) },
      { clock, flushIntervalMs: 0, maxSubjectsPerMinute: 100, maxPendingMinutes: 3 },
    )
    for (let i = 0; i < 200; i++) usage.count('allowed', `t${i}`, `k${i}`)
    assert.equal(usage.stats().overflow, 300, '150 tenants and 150 keys beyond the first 100')
    for (let i = 0; i < 5; i++) {
      clock.advance(MINUTE)
      usage.count('allowed', null, null)
    }
    assert.equal(usage.stats().pendingMinutes, 3)
    assert.equal(usage.stats().droppedMinutes, 3)
  })

  it('ranges: aligned, defaulted, bounded; CSV with ISO times', async () => {
    assert.deepEqual(usageRange({ resolution: 'hour' }, T), {
      resolution: 'hour',
      since: Date.UTC(2026, 2, 8, 10),
      until: Date.UTC(2026, 2, 10, 10),
    })
    assert.throws(
      () => usageRange({ resolution: 'minute', since: 0, until: T }, T),
      /longer than 1440/,
    )
    assert.throws(() => usageRange({ since: T, until: T - MINUTE }, T), /before until/)
    assert.throws(() => usageRange({ resolution: 'week' as 'day' }, T), /resolution: "week"/)
    const csv = usageCsv(await series('key', '=k1', 'minute', T))
    const lines = csv.trimEnd().split('\r\n')
    assert.equal(lines[0], 'start,resolution,scope,subject,allowed,unauthorized,forbidden,limited')
    assert.match(lines[1] as string, /^2026-03-10T09:00:00.000Z,minute,key,'=k1,0,0,0,0$/)
  })
})

describe('usage write-behind through the SQLite writer thread', () => {
  it('stores each slice once, as the store on the main thread does (rows sent as one JSON text)', async () => {
    const dir = tempDir('tg-usage-thread-')
    const direct = openSqliteStore(join(dir, 'direct.sqlite'))
    await direct.migrate()
    const migrated = openSqliteStore(join(dir, 'thread.sqlite'))
    await migrated.migrate()
    await migrated.close()
    const threaded = openSqliteWithWriter(join(dir, 'thread.sqlite'))
    try {
      const rows = (n: number): UsageRow[] =>
        Array.from({ length: n }, (_, i) => ({
          scope: 'key' as const,
          subject: `k${i}`,
          resolution: 'minute' as const,
          bucketStart: T - (T % MINUTE),
          tenantId: i % 2 === 0 ? 'acme' : null,
          allowed: i + 1,
          unauthorized: i % 3,
          forbidden: 0,
          limited: 2,
        }))
      for (const store of [direct, threaded]) {
        await store.addUsage(rows(300), { mark: 'seg:1:0' })
        // A replayed slice (same mark) adds nothing; an unmarked write and an empty one do.
        await store.addUsage(rows(300), { mark: 'seg:1:0' })
        await store.addUsage(rows(2))
        await store.addUsage([], { mark: 'seg:1:300' })
      }
      for (const subject of ['k0', 'k1', 'k299']) {
        const query = {
          scope: 'key' as const,
          subject,
          resolution: 'minute' as const,
          since: T - MINUTE,
          until: T + MINUTE,
        }
        const got = await threaded.readUsage(query)
        assert.deepEqual(got, await direct.readUsage(query))
        assert.equal(got.length, 1)
      }
      const [k1] = await threaded.readUsage({
        scope: 'key',
        subject: 'k1',
        resolution: 'minute',
        since: T - MINUTE,
        until: T + MINUTE,
      })
      assert.deepEqual(
        [k1?.allowed, k1?.unauthorized, k1?.limited, k1?.tenantId],
        [2 + 2, 1 + 1, 2 + 2, null],
      )
    } finally {
      await direct.close()
      await threaded.close()
    }
  })
})

describe('last-used times through the SQLite writer thread', () => {
  it('move forward only and skip unknown ids (times sent as one JSON text)', async () => {
    const path = join(tempDir('tg-last-used-thread-'), 'db.sqlite')
    const migrated = openSqliteStore(path)
    await migrated.migrate()
    await migrated.createTenant({ id: 'acme', name: 'Acme' }, T0)
    for (const id of ['p1', 'p2', 'p3']) await migrated.insertPat(pat(id, 'acme'))
    await migrated.close()
    const store = openSqliteWithWriter(path)
    try {
      await store.recordPatUse(
        new Map([
          ['p1', T0 + 100],
          ['p2', T0 + 200],
          ['ghost', T0 + 300],
        ]),
      )
      await store.recordPatUse(
        new Map([
          ['p1', T0 + 50],
          ['p2', T0 + 250],
        ]),
      )
      await store.recordPatUse(new Map())
      const times = await Promise.all(
        ['p1', 'p2', 'p3'].map(async (id) => (await store.getPat(id))?.lastUsedAt),
      )
      assert.deepEqual(times, [T0 + 100, T0 + 250, null])
    } finally {
      await store.close()
    }
  })
})
