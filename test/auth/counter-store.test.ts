import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import {
  type CounterResult,
  type Counters,
  FallbackStore,
  MemoryCounters,
} from '../../src/auth/counter-store.ts'

const WINDOW = 60_000

/** The in-process counters answer synchronously: the callback's result, returned. */
function call(counters: Counters, method: 'incr' | 'read', key: string): CounterResult {
  let answer: CounterResult | undefined
  counters[method](
    key,
    (error, result) => {
      assert.equal(error, null)
      answer = result
    },
    WINDOW,
    1000,
  )
  assert.ok(answer, 'answered synchronously')
  return answer
}

function clock(start = 1_700_000_000_000) {
  const state = { now: start }
  return { state, now: () => state.now }
}

describe('MemoryCounters', () => {
  it('counts hits in a fixed window and reports the time left of it', () => {
    const time = clock()
    const counters = new MemoryCounters(10, time.now)
    assert.deepEqual(call(counters, 'incr', 'k'), { current: 1, ttl: WINDOW })
    time.state.now += 1500
    assert.deepEqual(call(counters, 'incr', 'k'), { current: 2, ttl: WINDOW - 1500 })
    assert.deepEqual(call(counters, 'read', 'k'), { current: 2, ttl: WINDOW - 1500 })
    assert.deepEqual(call(counters, 'incr', 'other'), { current: 1, ttl: WINDOW })
  })

  it("incr's and read's results are the caller's own: later counts leave them as they were", () => {
    const time = clock()
    const counters = new MemoryCounters(10, time.now)
    const first = call(counters, 'incr', 'k')
    const read = call(counters, 'read', 'k')
    time.state.now += 1_000
    call(counters, 'incr', 'k')
    counters.countNow('k', true, WINDOW, 0, time.now())
    assert.deepEqual(first, { current: 1, ttl: WINDOW })
    assert.deepEqual(read, { current: 1, ttl: WINDOW })
  })

  it('countNow answers the count at the time given, and again after other keys were counted', () => {
    const time = clock()
    const counters = new MemoryCounters(10, time.now)
    const at = time.now() + 2_000
    assert.deepEqual(
      { ...counters.countNow('k', true, WINDOW, 0, at) },
      { current: 1, ttl: WINDOW },
    )
    counters.countNow('other', true, WINDOW, 0, at)
    assert.deepEqual(
      { ...counters.countNow('k', true, WINDOW, 0, at + 500) },
      { current: 2, ttl: WINDOW - 500 },
    )
    assert.deepEqual(
      { ...counters.countNow('k', false, WINDOW, 0, at + WINDOW) },
      { current: 0, ttl: 0 },
    )
  })

  it('starts a new window once the old one has ended; a read of an ended window is empty', () => {
    const time = clock()
    const counters = new MemoryCounters(10, time.now)
    call(counters, 'incr', 'k')
    call(counters, 'incr', 'k')
    time.state.now += WINDOW
    assert.deepEqual(call(counters, 'read', 'k'), { current: 0, ttl: 0 })
    assert.deepEqual(call(counters, 'incr', 'k'), { current: 1, ttl: WINDOW })
    assert.deepEqual(call(counters, 'read', 'never-hit'), { current: 0, ttl: 0 })
  })

  it('drops the least recently hit key once maxKeys are held, and its slot starts clean', () => {
    const time = clock()
    const counters = new MemoryCounters(3, time.now)
    for (const key of ['a', 'b', 'c']) call(counters, 'incr', key)
    call(counters, 'incr', 'a') // a is now the most recent; b the least
    call(counters, 'incr', 'b')
    call(counters, 'incr', 'b') // b: 3 hits, most recent; c is the least
    call(counters, 'incr', 'd') // evicts c, reuses its slot
    assert.equal(counters.size, 3)
    assert.deepEqual(call(counters, 'read', 'c'), { current: 0, ttl: 0 })
    assert.equal(call(counters, 'read', 'd').current, 1)
    assert.equal(call(counters, 'read', 'a').current, 2)
    assert.equal(call(counters, 'read', 'b').current, 3)
    // c comes back as a new key: counted from 1, not from what its old slot held.
    assert.equal(call(counters, 'incr', 'c').current, 1)
    assert.deepEqual(call(counters, 'read', 'a'), { current: 0, ttl: 0 }, 'a was the oldest')
  })

  it('a read does not refresh recency', () => {
    const counters = new MemoryCounters(2, clock().now)
    call(counters, 'incr', 'a')
    call(counters, 'incr', 'b')
    call(counters, 'read', 'a')
    call(counters, 'incr', 'c')
    assert.equal(call(counters, 'read', 'a').current, 0)
    assert.equal(call(counters, 'read', 'b').current, 1)
  })

  it('keeps exactly the last maxKeys keys, with their counts, across growth and reuse', () => {
    const counters = new MemoryCounters(100, clock().now)
    for (let round = 1; round <= 2; round++) {
      for (let i = 0; i < 1000; i++) call(counters, 'incr', `key-${i}`)
    }
    assert.equal(counters.size, 100)
    for (let i = 0; i < 900; i++) assert.equal(call(counters, 'read', `key-${i}`).current, 0)
    // Each of the last 100 was evicted after round 1 and counted once again in round 2.
    for (let i = 900; i < 1000; i++) assert.equal(call(counters, 'read', `key-${i}`).current, 1)
  })
})

describe('FallbackStore without Redis', () => {
  it('counts in-process, each policy child with its own keys', () => {
    const log = { warn() {}, info() {} }
    const store = new FallbackStore({ redisPrefix: 'rl:', localMaxKeys: 10, log })
    const perToken = store.child({ policy: 'per-token' })
    const perTenant = store.child({ policy: 'per-tenant' })
    call(perToken, 'incr', 'same-key')
    call(perToken, 'incr', 'same-key')
    assert.equal(call(perToken, 'read', 'same-key').current, 2)
    assert.equal(call(perTenant, 'read', 'same-key').current, 0)
    assert.equal(call(perTenant, 'incr', 'same-key').current, 1)
  })
})
