import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { failureResponse } from '../../src/http/failure-response.ts'
import { ONE_METHOD_FAILURE } from '../../src/http/one-method.ts'
import {
  problemResponse,
  rateLimitedResponse,
  storeUnavailable,
} from '../../src/http/problem-response.ts'

describe('problemResponse: one builder for every non-2xx answer', () => {
  it('takes the status from the problem table unless given, with the common headers', () => {
    const r = problemResponse('not_found', 'No such endpoint.', 'r1')
    assert.equal(r.status, 404)
    assert.equal(r.body.status, 404)
    assert.deepEqual(r.headers, {
      'content-type': 'application/problem+json',
      'cache-control': 'no-store',
    })
    assert.equal(problemResponse('validation_failed', 'x', 'r1', { status: 415 }).status, 415)
  })

  it('every kind carries content-type and no-store, whichever module builds it', () => {
    const all = [
      failureResponse({ code: 'missing_authorization' } as never, 'r'),
      failureResponse({ code: 'insufficient_permission', required: ['a:b'] } as never, 'r'),
      failureResponse({ code: 'unavailable', retryAfterSeconds: 2 } as never, 'r'),
      failureResponse(ONE_METHOD_FAILURE, 'r'),
      storeUnavailable('r'),
      rateLimitedResponse(
        { name: 'per-token', quota: 5, windowSec: 60, remaining: 0, resetSec: 7 },
        'r',
      ),
    ]
    for (const r of all) {
      assert.equal(r.headers['content-type'], 'application/problem+json', r.body.code)
      assert.equal(r.headers['cache-control'], 'no-store', r.body.code)
      assert.equal(r.body.status, r.status)
    }
    const limited = all.at(-1)
    assert.equal(limited?.headers['retry-after'], '7')
    assert.equal(limited?.body.policy, 'per-token')
    assert.equal(storeUnavailable('r').headers['retry-after'], '5')
  })
})
