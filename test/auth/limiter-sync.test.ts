import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { CounterResult, CounterStore } from '../../src/auth/counter-store.ts'
import { FallbackStore, MemoryCounters } from '../../src/auth/counter-store.ts'
import {
  addressKeyOf,
  createLimiter,
  type LimitVerdict,
  type RateLimitConfig,
} from '../../src/auth/limiter.ts'
import type { Principal } from '../../src/core/principal.ts'
import { mostConstraining } from '../../src/http/rate-limit-headers.ts'
import { isPromiseLike } from '../../src/lib/maybe-async.ts'

const log = { warn() {}, info() {} }
const config: RateLimitConfig = {
  enabled: true,
  perToken: { max: 2, windowSec: 60 },
  perTenant: { max: 3, windowSec: 60 },
  failedAuth: { max: 1, windowSec: 60 },
} as RateLimitConfig

function principal(tokenId: string): Principal {
  return {
    tokenType: 'pat',
    tenantId: 'acme',
    subject: 'svc',
    permissions: [],
    tokenId,
    expiresAt: null,
    fingerprint: `fp-${tokenId}`,
  }
}

/** Counters that answer only through the callback, a turn later (what Redis does). */
class AsyncCounters implements CounterStore {
  readonly #local = new MemoryCounters(100)
  incr(key: string, callback: (e: Error | null, r?: CounterResult) => void, w: number): void {
    setImmediate(() => this.#local.incr(key, callback, w))
  }
  read(key: string, callback: (e: Error | null, r?: CounterResult) => void, w: number): void {
    setImmediate(() => this.#local.read(key, callback, w))
  }
  child(): CounterStore {
    return new AsyncCounters()
  }
}

/** The verdicts of three requests of token A, then one of token B, as the gate sees them. */
async function sequence(store: CounterStore, expectSync: boolean) {
  const limiter = createLimiter(config, store)
  const verdicts: LimitVerdict[] = []
  for (const id of ['A', 'A', 'A', 'B', 'B']) {
    const verdict = limiter.limit(principal(id), undefined)
    assert.equal(isPromiseLike(verdict), !expectSync)
    verdicts.push(await verdict)
  }
  // A failed authentication, and the address then over its limit of 1, alike.
  const failed = limiter.failed('address', undefined)
  assert.equal(isPromiseLike(failed), !expectSync)
  assert.deepEqual(await failed, { refused: true, state: (await failed).state })
  const admitted = limiter.admit('address', undefined)
  assert.equal(isPromiseLike(admitted), !expectSync)
  assert.equal((await admitted).refused, true)
  return verdicts.map((v) => [v.refused, v.state?.name, v.state?.remaining])
}

// Token A: 2 allowed, the third refused by its token limit without spending the tenant's
// allowance; token B then meets the tenant's third and fourth requests.
const EXPECTED = [
  [false, 'per-token', 1],
  [false, 'per-token', 0],
  [true, 'per-token', 0],
  [false, 'per-tenant', 0],
  [true, 'per-tenant', 0],
]

describe('limiter: in-process counters decide synchronously, others through a promise', () => {
  it('in-process (FallbackStore without Redis): values, exact counts', async () => {
    const store = new FallbackStore({ redisPrefix: 'rl:', localMaxKeys: 10, log })
    assert.deepEqual(await sequence(store, true), EXPECTED)
  })

  it('counters that call back later: promises, the same verdicts', async () => {
    assert.deepEqual(await sequence(new AsyncCounters(), false), EXPECTED)
  })

  it('limitPrincipal and gate call back with the same verdicts as limit and admit', async () => {
    for (const store of [
      new FallbackStore({ redisPrefix: 'rl:', localMaxKeys: 10, log }),
      new AsyncCounters(),
    ]) {
      const limiter = createLimiter(config, store)
      const seen: unknown[] = []
      for (const id of ['A', 'A', 'A']) {
        const verdict = await new Promise<LimitVerdict>((resolve, reject) =>
          limiter.limitPrincipal(principal(id), undefined, (error, v) =>
            error || !v ? reject(error) : resolve(v),
          ),
        )
        seen.push([verdict.refused, verdict.state?.remaining])
      }
      assert.deepEqual(seen, [
        [false, 1],
        [false, 0],
        [true, 0],
      ])
      // One failure reaches the failed-auth limit of 1: the address is refused, a credential
      // that authenticated here is let through to try.
      const failure = await new Promise<LimitVerdict>((resolve) =>
        limiter.countFailure('addr', undefined, (_e, v) => resolve(v as LimitVerdict)),
      )
      assert.equal(failure.refused, true)
      assert.equal((await limiter.admit('addr', undefined)).refused, true)
      await limiter.limit(principal('C'), 'digest-c')
      assert.equal((await limiter.admit('addr', 'digest-c')).refused, false)
      const gated = await new Promise<LimitVerdict>((resolve) =>
        limiter.gate('addr', undefined, (_e, v) => resolve(v as LimitVerdict)),
      )
      assert.equal(gated.refused, true)
    }
  })

  it('admit and failed key the client address (an IPv6 /64, a mapped IPv4) as gate and countFailure are keyed', async () => {
    const limiter = createLimiter(
      config,
      new FallbackStore({ redisPrefix: 'rl:', localMaxKeys: 10, log }),
    )
    assert.equal((await limiter.failed('2001:db8::1', undefined)).refused, true)
    assert.equal((await limiter.admit('2001:db8::2', undefined)).refused, true, 'same /64')
    assert.equal((await limiter.admit('2001:db8:0:1::1', undefined)).refused, false, 'other /64')
    const gated = await new Promise<LimitVerdict>((resolve) =>
      limiter.gate(addressKeyOf('2001:db8::3'), undefined, (_e, v) => resolve(v as LimitVerdict)),
    )
    assert.equal(gated.refused, true, 'the callback API, given the key')
    assert.equal((await limiter.failed('::ffff:10.0.0.1', undefined)).refused, true)
    assert.equal((await limiter.admit('10.0.0.1', undefined)).refused, true, 'mapped = IPv4')
  })
})

describe('limiter: counts, states and the clock', () => {
  it('a failure reports the limit reached once, at the failure that reaches it, not at later ones', async () => {
    const limiter = createLimiter(
      { ...config, failedAuth: { max: 2, windowSec: 60 } },
      new FallbackStore({ redisPrefix: 'rl:', localMaxKeys: 10, log }),
    )
    const seen = []
    for (let i = 0; i < 4; i++) {
      const verdict = await limiter.failed('10.0.0.9', undefined)
      seen.push([verdict.refused, verdict.state?.remaining])
    }
    assert.deepEqual(seen, [
      [false, 1],
      [true, 0],
      [false, 0],
      [false, 0],
    ])
  })

  it('reads its clock once per call: the known credential, both counts and their reset times', async () => {
    let now = 1_700_000_000_000
    let reads = 0
    const limiter = createLimiter(
      config,
      new FallbackStore({ redisPrefix: 'rl:', localMaxKeys: 10, log }),
      () => {
        reads++
        return now
      },
    )
    const first = await limiter.limit(principal('A'), 'digest-a')
    assert.equal(reads, 1)
    assert.deepEqual(first, {
      refused: false,
      state: { name: 'per-token', quota: 2, windowSec: 60, remaining: 1, resetSec: 60 },
    })
    // 59.5 s on: the windows that began at the first request have 1 s left (rounded up).
    now += 59_500
    const second = await limiter.limit(principal('A'), 'digest-a')
    assert.deepEqual(second.state, {
      name: 'per-token',
      quota: 2,
      windowSec: 60,
      remaining: 0,
      resetSec: 1,
    })
    // The credential was remembered at the limiter's time: an hour and a bit later it is not
    // known any more, so a throttled address is refused for it.
    await limiter.failed('10.0.0.8', undefined)
    assert.equal((await limiter.admit('10.0.0.8', 'digest-a')).refused, false)
    now += 3_600_001
    await limiter.failed('10.0.0.8', undefined)
    assert.equal((await limiter.admit('10.0.0.8', 'digest-a')).refused, true)
    assert.equal(reads, 6)
  })
})

describe('limiter: the one RateLimit state shown', () => {
  /** A policy's state as the 429 and the RateLimit pair show it, counted here independently. */
  const stateOf = (name: string, max: number, windowSec: number, hits: number, ttlMs: number) => ({
    name,
    quota: max,
    windowSec,
    remaining: Math.max(0, max - hits),
    resetSec: ttlMs > 0 ? Math.max(1, Math.ceil(ttlMs / 1000)) : windowSec,
  })

  it("is mostConstraining's pick of the token's and the tenant's states, ties included", async () => {
    const start = 1_700_000_000_000
    // Token and tenant maxima and windows around each other: fewer remaining wins, equal
    // remaining goes to the longer wait, equal waits to the token.
    const shapes: Array<[number, number, number, number]> = [
      [5, 60, 9, 60],
      [9, 60, 5, 60],
      [5, 60, 5, 60],
      [5, 30, 5, 60],
      [5, 60, 5, 30],
      [3, 10, 8, 120],
      [8, 120, 3, 10],
    ]
    for (const [tokenMax, tokenWindow, tenantMax, tenantWindow] of shapes) {
      let now = start
      const limiter = createLimiter(
        {
          ...config,
          perToken: { max: tokenMax, windowSec: tokenWindow },
          perTenant: { max: tenantMax, windowSec: tenantWindow },
        },
        new FallbackStore({ redisPrefix: 'rl:', localMaxKeys: 10, log }),
        () => now,
      )
      // Both windows began at `start`; the same principal object, request after request.
      const caller = principal('A')
      for (let hits = 1; hits <= Math.min(tokenMax, tenantMax); hits++) {
        const verdict = await limiter.limit(caller, undefined)
        const elapsed = now - start
        const token = stateOf(
          'per-token',
          tokenMax,
          tokenWindow,
          hits,
          tokenWindow * 1000 - elapsed,
        )
        const tenant = stateOf(
          'per-tenant',
          tenantMax,
          tenantWindow,
          hits,
          tenantWindow * 1000 - elapsed,
        )
        assert.deepEqual(
          verdict,
          { refused: false, state: mostConstraining(token, tenant) },
          `${[tokenMax, tokenWindow, tenantMax, tenantWindow]} at hit ${hits}`,
        )
        now += 2_500
      }
    }
  })

  it('counts each principal under its own key when principals alternate (the last key is kept)', async () => {
    const limiter = createLimiter(
      { ...config, perTenant: { max: 100, windowSec: 60 } },
      new FallbackStore({ redisPrefix: 'rl:', localMaxKeys: 10, log }),
    )
    const a = principal('A')
    const b = principal('B')
    const seen = []
    for (const caller of [a, b, a, b, principal('A'), b]) {
      const verdict = await limiter.limit(caller, undefined)
      seen.push([caller.tokenId, verdict.refused, verdict.state?.remaining])
    }
    // perToken max 2: the third request of each token is over it, whatever object carries it.
    assert.deepEqual(seen, [
      ['A', false, 1],
      ['B', false, 1],
      ['A', false, 0],
      ['B', false, 0],
      ['A', true, 0],
      ['B', true, 0],
    ])
  })
})
