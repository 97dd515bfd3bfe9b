/**
 * The quota counter against a real store (SQLite): uses spent from reserved blocks without a
 * store call, never beyond the limit across counters sharing the store, exhaustion believed
 * for `recheckMs`, periods, edits, shutdown, and an unreachable store (fail closed).
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { createQuotaCounter } from '../../src/auth/quota-counter.ts'
import type { AuthFailure } from '../../src/core/failure.ts'
import type { Quota } from '../../src/core/ports.ts'
import { isPromiseLike } from '../../src/lib/maybe-async.ts'
import { openSqliteStore, type SqliteStore } from '../../src/stores/sqlite.ts'
import { testClock } from '../helpers/clock.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const DAY_MS = 86_400_000

describe('quota counter', () => {
  let store: SqliteStore
  let n = 0
  const counter = () => `c${++n}`

  before(async () => {
    store = openSqliteStore(join(tempDir('tg-quota-'), 'db.sqlite'))
    await store.migrate()
  })
  after(() => store.close())

  /** The store, counting reservations. */
  function counting() {
    const calls = { reserve: 0, release: 0 }
    return {
      calls,
      store: {
        reserveQuota: (...args: Parameters<SqliteStore['reserveQuota']>) => {
          calls.reserve++
          return store.reserveQuota(...args)
        },
        releaseQuota: (...args: Parameters<SqliteStore['releaseQuota']>) => {
          calls.release++
          return store.releaseQuota(...args)
        },
      },
    }
  }

  async function spend(take: () => unknown, times: number) {
    const outcomes: (AuthFailure | undefined)[] = []
    for (let i = 0; i < times; i++) outcomes.push((await take()) as AuthFailure | undefined)
    return outcomes
  }

  it('spends reserved uses without asking the store, synchronously; a busy key’s blocks grow to the cap', async () => {
    const clock = testClock()
    const { calls, store: s } = counting()
    const quotas = createQuotaCounter({ store: s, clock, maxBlock: 10 })
    const quota: Quota = { limit: 1000, refill: 'daily', counter: counter() }
    const reservedAt: number[] = []
    for (let i = 1; i <= 30; i++) {
      const before = calls.reserve
      const result = quotas.take(quota)
      if (isPromiseLike(result)) assert.equal(await result, undefined)
      else assert.equal(result, undefined)
      if (calls.reserve > before) reservedAt.push(i)
      else assert.ok(!isPromiseLike(result), `take ${i} was answered from the block`)
    }
    // Blocks of 4, then doubled while spent within a second: 8, then the cap (10).
    assert.deepEqual(reservedAt, [1, 5, 13, 23])
  })

  it('a quiet key’s blocks shrink again', async () => {
    const clock = testClock()
    const { calls, store: s } = counting()
    const quotas = createQuotaCounter({ store: s, clock, maxBlock: 64 })
    const quota: Quota = { limit: 100_000, refill: 'none', counter: counter() }
    await spend(() => quotas.take(quota), 4 + 8 + 16)
    assert.equal(calls.reserve, 3)
    clock.advance(120_000)
    await spend(() => quotas.take(quota), 1)
    const used = (await store.readQuota([quota.counter])).get(quota.counter)?.used
    assert.equal(used, 4 + 8 + 16 + 8, 'the fourth block is half the third')
  })

  it('two instances on one store never allow more than the limit in all', async () => {
    const clock = testClock()
    const a = createQuotaCounter({ store, clock, maxBlock: 3 })
    const b = createQuotaCounter({ store, clock, maxBlock: 3 })
    const quota: Quota = { limit: 250, refill: 'none', counter: counter() }
    const outcomes = await Promise.all(
      Array.from({ length: 400 }, (_, i) => (i % 2 === 0 ? a : b).take(quota)),
    )
    const allowed = outcomes.filter((o) => o === undefined).length
    assert.ok(allowed <= 250, `${allowed} allowed`)
    // Under-use is bounded by a block less one per instance.
    assert.ok(allowed >= 250 - 2 * 2, `${allowed} allowed`)
    const refusal = outcomes.find((o) => o !== undefined)
    assert.deepEqual(refusal, {
      code: 'quota_exhausted',
      quota: { limit: 250, refill: 'none', resetsAt: null, retryAfterSec: undefined },
    })
  })

  it('an exhausted counter is believed for recheckMs, then the store is asked again', async () => {
    const clock = testClock()
    const { calls, store: s } = counting()
    const quotas = createQuotaCounter({ store: s, clock, recheckMs: 5000 })
    const quota: Quota = { limit: 2, refill: 'none', counter: counter() }
    const outcomes = await spend(() => quotas.take(quota), 5)
    assert.deepEqual(
      outcomes.map((o) => o?.code),
      [undefined, undefined, 'quota_exhausted', 'quota_exhausted', 'quota_exhausted'],
    )
    const reservations = calls.reserve
    clock.advance(4999)
    assert.equal((quotas.take(quota) as AuthFailure).code, 'quota_exhausted')
    assert.equal(calls.reserve, reservations)
    // Another instance gave uses back meanwhile (its shutdown): seen after the recheck.
    await store.releaseQuota(quota.counter, 0, 0, 1)
    clock.advance(1)
    assert.equal(await quotas.take(quota), undefined)
    assert.equal(calls.reserve, reservations + 1)
  })

  it('a daily quota refills at the next UTC day; Retry-After counts down to it', async () => {
    const clock = testClock(Date.UTC(2026, 4, 1, 23, 59, 0))
    const quotas = createQuotaCounter({ store, clock })
    const quota: Quota = { limit: 1, refill: 'daily', counter: counter() }
    assert.equal(await quotas.take(quota), undefined)
    const refused = (await quotas.take(quota)) as AuthFailure
    assert.deepEqual(refused, {
      code: 'quota_exhausted',
      quota: {
        limit: 1,
        refill: 'daily',
        resetsAt: Date.UTC(2026, 4, 2),
        retryAfterSec: 60,
      },
    })
    clock.advance(60_000)
    assert.equal(await quotas.take(quota), undefined)
  })

  it('monthly and interval periods', async () => {
    const clock = testClock(Date.UTC(2026, 1, 27, 12))
    const quotas = createQuotaCounter({ store, clock })
    const monthly: Quota = { limit: 1, refill: 'monthly', counter: counter() }
    const interval: Quota = {
      limit: 1,
      refill: 'interval',
      intervalSec: 3600,
      anchorAt: Date.UTC(2026, 1, 27, 11, 30),
      counter: counter(),
    }
    await quotas.take(monthly)
    await quotas.take(interval)
    const m = (await quotas.take(monthly)) as AuthFailure
    const i = (await quotas.take(interval)) as AuthFailure
    assert.ok(m.code === 'quota_exhausted' && i.code === 'quota_exhausted')
    assert.equal(m.quota.resetsAt, Date.UTC(2026, 2, 1))
    assert.equal(i.quota.resetsAt, Date.UTC(2026, 1, 27, 12, 30))
    clock.advance(30 * 60_000)
    assert.equal(await quotas.take(interval), undefined)
    clock.advance(2 * DAY_MS)
    assert.equal(await quotas.take(monthly), undefined)
  })

  it('a changed quota (raised, or its uses reset) drops the verdict and the block at once', async () => {
    const clock = testClock()
    const quotas = createQuotaCounter({ store, clock, recheckMs: 60_000 })
    const id = counter()
    const quota: Quota = { limit: 1, refill: 'none', counter: id }
    await quotas.take(quota)
    assert.equal(((await quotas.take(quota)) as AuthFailure).code, 'quota_exhausted')
    assert.equal(await quotas.take({ ...quota, limit: 2 }), undefined)
    const raised = { ...quota, limit: 2 }
    assert.equal(((await quotas.take(raised)) as AuthFailure).code, 'quota_exhausted')
    // The count reset in the store: an equal quota (another object) is still believed spent;
    // the reset quota (a new resetAt, as the edit writes it) is counted afresh at once.
    await store.resetQuota(id)
    assert.equal(((await quotas.take({ ...raised })) as AuthFailure).code, 'quota_exhausted')
    assert.equal(await quotas.take({ ...raised, resetAt: clock.now() }), undefined)
  })

  it('uses reserved before a reset and given back at shutdown never lower the new count', async () => {
    const clock = testClock()
    const quota: Quota = { limit: 400, refill: 'none', counter: counter() }
    const before = createQuotaCounter({ store, clock })
    assert.equal(await before.take(quota), undefined)
    await store.resetQuota(quota.counter)
    const after = createQuotaCounter({ store, clock })
    const reset = { ...quota, resetAt: clock.now() }
    assert.deepEqual(
      (await spend(() => after.take(reset), 401)).filter((o) => o === undefined).length,
      400,
    )
    await before.close()
    assert.equal((await store.readQuota([quota.counter])).get(quota.counter)?.used, 400)
  })

  it('concurrent takes wait for one reservation at a time', async () => {
    const clock = testClock()
    let inFlight = 0
    let most = 0
    let reservations = 0
    const quotas = createQuotaCounter({
      store: {
        reserveQuota: async (...args: Parameters<SqliteStore['reserveQuota']>) => {
          reservations++
          most = Math.max(most, ++inFlight)
          await new Promise((resolve) => setTimeout(resolve, 5))
          inFlight--
          return store.reserveQuota(...args)
        },
        releaseQuota: (...args: Parameters<SqliteStore['releaseQuota']>) =>
          store.releaseQuota(...args),
      },
      clock,
      maxBlock: 50,
    })
    const quota: Quota = { limit: 5000, refill: 'none', counter: counter() }
    const outcomes = await Promise.all(Array.from({ length: 40 }, () => quotas.take(quota)))
    assert.ok(outcomes.every((o) => o === undefined))
    assert.equal(most, 1)
    // Blocks of 4, 8, 16, 32: four reservations serve the 40.
    assert.equal(reservations, 4)
  })

  it('close gives back unspent uses', async () => {
    const clock = testClock()
    const quotas = createQuotaCounter({ store, clock, maxBlock: 10 })
    const quota: Quota = { limit: 1000, refill: 'none', counter: counter() }
    await spend(() => quotas.take(quota), 7)
    assert.equal((await store.readQuota([quota.counter])).get(quota.counter)?.used, 4 + 8)
    await quotas.close()
    assert.equal((await store.readQuota([quota.counter])).get(quota.counter)?.used, 7)
  })

  it('an unreachable store fails closed: 503 unavailable, never a pass', async () => {
    const clock = testClock()
    const quotas = createQuotaCounter({
      store: {
        reserveQuota: () => Promise.reject(new Error('down')),
        releaseQuota: async () => {},
      },
      clock,
    })
    const quota: Quota = { limit: 10, refill: 'none', counter: counter() }
    assert.deepEqual(await quotas.take(quota), {
      code: 'unavailable',
      dependency: 'store',
      retryAfterSeconds: 5,
    })
  })
})
