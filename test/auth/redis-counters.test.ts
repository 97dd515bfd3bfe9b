import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import type { CounterResult, Counters } from '../../src/auth/counters.ts'
import { connectRedis, type RedisClient } from '../../src/auth/redis-client.ts'
import { RedisCounters } from '../../src/auth/redis-counters.ts'
import { type RedisServer, skipReason, startRedis } from '../helpers/services.ts'

const WINDOW = 60_000
const log = { warn: () => {} }

function call(counters: Counters, method: 'incr' | 'read', key: string): Promise<CounterResult> {
  return new Promise((resolve, reject) =>
    counters[method](
      key,
      (error, result) =>
        error || !result ? reject(error ?? new Error('no result')) : resolve(result),
      WINDOW,
      1000,
    ),
  )
}

describe('RedisCounters (EVALSHA, EVAL after NOSCRIPT) on a real Redis', {
  skip: skipReason('redis'),
}, () => {
  let server: RedisServer
  let a: RedisClient
  let b: RedisClient

  before(async () => {
    server = await startRedis()
    a = await connectRedis(server.url, { timeoutMs: 2000, log })
    b = await connectRedis(server.url, { timeoutMs: 2000, log })
  })

  after(async () => {
    a?.disconnect()
    b?.disconnect()
    await server?.stop()
  })

  it('counts in a fixed window under its prefix, and reads without counting', async () => {
    const counters = new RedisCounters(a, 'rl:t1:')
    const first = await call(counters, 'incr', 'k')
    assert.deepEqual(first, { current: 1, ttl: WINDOW })
    const second = await call(counters, 'incr', 'k')
    assert.equal(second.current, 2)
    assert.ok(second.ttl > WINDOW - 5_000 && second.ttl <= WINDOW, `ttl ${second.ttl}`)
    const read = await call(counters, 'read', 'k')
    assert.equal(read.current, 2)
    assert.deepEqual(await call(counters, 'read', 'never'), { current: 0, ttl: 0 })
    assert.equal(await a.get('rl:t1:k'), '2')
    const ttl = await a.pttl('rl:t1:k')
    assert.ok(ttl > WINDOW - 5_000 && ttl <= WINDOW, `pttl ${ttl}`)
  })

  it('after SCRIPT FLUSH (a new master, a restarted server) both scripts load again and count on', async () => {
    const counters = new RedisCounters(a, 'rl:t2:')
    assert.equal((await call(counters, 'incr', 'k')).current, 1)
    assert.equal((await call(counters, 'read', 'k')).current, 1)
    await a.script('FLUSH')
    assert.equal((await call(counters, 'read', 'k')).current, 1)
    await a.script('FLUSH')
    assert.equal((await call(counters, 'incr', 'k')).current, 2)
    assert.equal((await call(counters, 'incr', 'k')).current, 3)
    assert.equal(await a.get('rl:t2:k'), '3')
  })

  it('two instances counting one key at once: every hit counted once, no count answered twice', async () => {
    const onA = new RedisCounters(a, 'rl:t3:')
    const onB = new RedisCounters(b, 'rl:t3:')
    await a.script('FLUSH') // both clients meet NOSCRIPT in the middle of the burst
    const answers = await Promise.all(
      Array.from({ length: 400 }, (_, i) => call(i % 2 ? onB : onA, 'incr', 'shared')),
    )
    const counts = answers.map((answer) => answer.current).sort((x, y) => x - y)
    assert.deepEqual(
      counts,
      Array.from({ length: 400 }, (_, i) => i + 1),
    )
    assert.equal(await a.get('rl:t3:shared'), '400')
  })

  it("Redis's errors reach the callback (the caller then counts in-process)", async () => {
    const counters = new RedisCounters(a, 'rl:t4:')
    await a.set('rl:t4:k', 'not a number')
    await assert.rejects(call(counters, 'incr', 'k'), /not an integer/)
    await a.hset('rl:t4:h', 'f', '1')
    await assert.rejects(call(counters, 'read', 'h'), /WRONGTYPE/)
  })
})
