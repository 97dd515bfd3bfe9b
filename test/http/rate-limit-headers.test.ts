import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { LimitState } from '../../src/core/failure.ts'
import { rateLimitHeaders } from '../../src/http/rate-limit-headers.ts'

const state = (name: LimitState['name'], quota: number, windowSec: number, remaining = 3) =>
  ({ name, quota, windowSec, remaining, resetSec: 7 }) as LimitState

describe('rateLimitHeaders', () => {
  it('builds each policy value right when policies alternate (the last one is kept)', () => {
    const cases: [LimitState, string][] = [
      [state('per-token', 1200, 60), '"per-token";q=1200;w=60'],
      [state('per-token', 1200, 60, 2), '"per-token";q=1200;w=60'],
      [state('per-tenant', 1200, 60), '"per-tenant";q=1200;w=60'],
      [state('per-tenant', 1201, 60), '"per-tenant";q=1201;w=60'],
      [state('per-tenant', 1201, 61), '"per-tenant";q=1201;w=61'],
      [state('per-token', 1200, 60), '"per-token";q=1200;w=60'],
      [state('failed-auth', 10, 60, 0), '"failed-auth";q=10;w=60'],
    ]
    for (const [limit, policy] of cases) {
      assert.deepEqual(rateLimitHeaders(limit), {
        'ratelimit-policy': policy,
        ratelimit: `"${limit.name}";r=${limit.remaining};t=7`,
      })
    }
  })

  it('writes remaining as String() does: zero, large and non-integer counts', () => {
    for (const remaining of [0, 1, 9, 10, 999_999_999, 2 ** 53 - 1, 2 ** 53, 1.5, 1e21]) {
      const headers = rateLimitHeaders(state('per-token', 1200, 60, remaining))
      assert.equal(headers.ratelimit, `"per-token";r=${String(remaining)};t=7`)
    }
  })
})
