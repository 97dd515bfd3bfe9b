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
import { openSqliteWithWriter } from '../../src/stores/sqlite-writer.ts'
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
    const wants: number[] = []
    return {
      calls,
      wants,
      store: {
        reserveQuota: (...args: Parameters<SqliteStore['reserveQuota']>) => {
          calls.reserve++
          wants.push(args[3])
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
    for (let i = 0; i < times; i++) {
      outcomes.push((await take()) as AuthFailure | undefined)
      await new Promise((resolve) => setImmediate(resolve))
    }
    return outcomes
  }

  it('spends reserved uses without asking the store, synchronously, asking for the next block before the current one is spent; a busy key’s blocks grow to the cap', async () => {
    const clock = testClock()
    const { calls, wants, store: s } = counting()
    const quotas = createQuotaCounter({ store: s, clock, maxBlock: 10 })
    const quota: Quota = { limit: 1000, refill: 'daily', counter: counter() }
    // The key's first block of the period is waited for (the key may be spent already).
    assert.equal(await quotas.take(quota), undefined)
    for (let i = 2; i <= 40; i++) {
      const result = quotas.take(quota)
      assert.ok(!isPromiseLike(result), `take ${i} waited for the store`)
      assert.equal(result, undefined)
      // The store answers between requests, as it does between a server's requests.
      await new Promise((resolve) => setImmediate(resolve))
    }
    // Blocks of 4, then doubled while spent within a second: 8, then the cap (10); each asked
    // for once half the one before was spent.
    assert.deepEqual(wants, [4, 8, 10, 10, 10, 10])
    const used = (await store.readQuota([quota.counter])).get(quota.counter)?.used ?? 0
    assert.ok(used >= 40 && used <= 40 + 2 * 10, `${used} reserved for 40 served`)
    assert.equal(calls.release, 0)
  })

  it('a quiet key’s blocks shrink again', async () => {
    const clock = testClock()
    const { wants, store: s } = counting()
    const quotas = createQuotaCounter({ store: s, clock, maxBlock: 64 })
    const quota: Quota = { limit: 100_000, refill: 'none', counter: counter() }
    await spend(() => quotas.take(quota), 4 + 8 + 16)
    const busiest = wants.at(-1) as number
    clock.advance(120_000)
    await spend(() => quotas.take(quota), 32)
    assert.ok(wants.length > 3)
    assert.equal(wants.at(-1), busiest / 2, `blocks asked: ${wants.join(', ')}`)
  })

  it('two instances on one store never allow more than the limit in all', async () => {
    const clock = testClock()
    // 200 takes at once per instance on blocks of 3: waiting is the point here, not its bound.
    const a = createQuotaCounter({ store, clock, maxBlock: 3, waitMs: 60_000 })
    const b = createQuotaCounter({ store, clock, maxBlock: 3, waitMs: 60_000 })
    const quota: Quota = { limit: 250, refill: 'none', counter: counter() }
    const outcomes = await Promise.all(
      Array.from({ length: 400 }, (_, i) => (i % 2 === 0 ? a : b).take(quota)),
    )
    const allowed = outcomes.filter((o) => o === undefined).length
    assert.ok(allowed <= 250, `${allowed} allowed`)
    // Under-use is bounded by two blocks per instance.
    assert.ok(allowed >= 250 - 2 * 2 * 3, `${allowed} allowed`)
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
    // Four on credit (a key not counted yet), the rest from blocks of 4, 8, 16, 32.
    assert.ok(reservations <= 4, `${reservations} reservations`)
  })

  it('a use given back under an equal quota object read anew (another lookup of the key) is given back', async () => {
    // Each store read of a key builds its own Quota object: the request refused for its rate
    // may carry another object than the request that created the counter's entry.
    const clock = testClock()
    const quotas = createQuotaCounter({ store: counting().store, clock })
    const first: Quota = { limit: 3, refill: 'daily', counter: counter() }
    const readAgain: Quota = { ...first }
    assert.equal(await quotas.take(first), undefined)
    assert.equal(await quotas.take(readAgain), undefined)
    assert.equal(await quotas.take(readAgain), undefined)
    quotas.giveBack(readAgain)
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(await quotas.take(readAgain), undefined, 'the use given back is spendable')
    assert.equal((await quotas.take(first))?.code, 'quota_exhausted')
  })

  it('a use given back is spendable by the next take even when a later reservation reaches the store before the give-back does', async () => {
    // The give-back's release is still on its way (the store busy, or another pool connection)
    // when the next take asks for a block: that reservation must not be answered from the count
    // before the release, and its "nothing left" must not be believed.
    const clock = testClock()
    let letGo = () => {}
    const held = new Promise<void>((resolve) => {
      letGo = resolve
    })
    const quotas = createQuotaCounter({
      store: {
        reserveQuota: (...args: Parameters<SqliteStore['reserveQuota']>) =>
          store.reserveQuota(...args),
        releaseQuota: async (...args: Parameters<SqliteStore['releaseQuota']>) => {
          await held
          return store.releaseQuota(...args)
        },
      },
      clock,
    })
    const quota: Quota = { limit: 3, refill: 'none', counter: counter() }
    for (let i = 0; i < 3; i++) assert.equal(await quotas.take(quota), undefined)
    quotas.giveBack(quota)
    const next = quotas.take(quota)
    setTimeout(letGo, 20)
    assert.equal(await next, undefined, 'the use given back is spendable')
    assert.equal((await store.readQuota([quota.counter])).get(quota.counter)?.used, 3)
    assert.equal((await quotas.take(quota))?.code, 'quota_exhausted')
  })

  it('through the SQLite writer thread (which answers reservations before the writes queued with them), a use given back is spendable at once', async () => {
    const path = join(tempDir('tg-quota-writer-'), 'db.sqlite')
    const migrated = openSqliteStore(path)
    await migrated.migrate()
    await migrated.close()
    const writer = openSqliteWithWriter(path)
    try {
      const quotas = createQuotaCounter({ store: writer, clock: testClock() })
      const quota: Quota = { limit: 3, refill: 'none', counter: counter() }
      for (let i = 0; i < 3; i++) assert.equal(await quotas.take(quota), undefined)
      // The release and the next reservation reach the thread together, as when a release
      // waits behind an audit batch or a flush and the next request's reservation arrives.
      quotas.giveBack(quota)
      assert.equal(await quotas.take(quota), undefined, 'the use given back is spendable')
      assert.equal((await quotas.take(quota))?.code, 'quota_exhausted')
    } finally {
      await writer.close()
    }
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

  it('a store that does not answer: a few uses on credit, then 503 after waitMs, never a long wait', async () => {
    const clock = testClock()
    const quotas = createQuotaCounter({
      store: { reserveQuota: () => new Promise(() => {}), releaseQuota: async () => {} },
      clock,
      waitMs: 50,
    })
    const quota: Quota = { limit: 10_000, refill: 'monthly', counter: counter() }
    // A key not counted yet this period: its first block is waited for (it may be spent).
    const started = performance.now()
    assert.deepEqual(await quotas.take(quota), {
      code: 'unavailable',
      dependency: 'store',
      retryAfterSeconds: 5,
    })
    const waited = performance.now() - started
    assert.ok(waited >= 45 && waited < 1000, `waited ${waited.toFixed(0)} ms`)
    // A quota under 100 uses gets no credit: counted exactly, or 503.
    const small: Quota = { limit: 99, refill: 'monthly', counter: counter() }
    assert.equal((await quotas.take(small))?.code, 'unavailable')
  })

  it('uses served on credit are counted in the store once it answers; beyond the limit they are reported', async () => {
    const clock = testClock()
    const overdrafts: number[] = []
    const slow = {
      reserveQuota: async (...args: Parameters<SqliteStore['reserveQuota']>) => {
        await new Promise((resolve) => setTimeout(resolve, 20))
        return store.reserveQuota(...args)
      },
      releaseQuota: (...args: Parameters<SqliteStore['releaseQuota']>) =>
        store.releaseQuota(...args),
    }
    const quotas = createQuotaCounter({
      store: slow,
      clock,
      onOverdraft: (_counter, uses) => overdrafts.push(uses),
    })
    const quota: Quota = { limit: 1000, refill: 'none', counter: counter() }
    // The first block (4) is waited for; then the key has credit (cap 10) while the store
    // answers late: 14 in a row, none waiting.
    assert.equal(await quotas.take(quota), undefined)
    for (let i = 0; i < 13; i++) assert.equal(quotas.take(quota), undefined, `take ${i + 2}`)
    await new Promise((resolve) => setTimeout(resolve, 60))
    assert.ok(((await store.readQuota([quota.counter])).get(quota.counter)?.used ?? 0) >= 14)
    // Another instance spends the rest meanwhile: this one's credit is the overdraft.
    await store.reserveQuota(quota.counter, 0, 1000, 1000)
    for (let i = 0; i < 30; i++) void quotas.take(quota)
    await new Promise((resolve) => setTimeout(resolve, 60))
    assert.equal(((await quotas.take(quota)) as AuthFailure).code, 'quota_exhausted')
    await quotas.close()
    const over = overdrafts.reduce((a, b) => a + b, 0)
    assert.ok(over > 0 && over <= 10, `overdraft ${over}, at most the cap (10)`)
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
