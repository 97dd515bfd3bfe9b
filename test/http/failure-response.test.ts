import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { AuthFailure } from '../../src/core/failure.ts'
import { bearerChallenge, quoteString } from '../../src/http/challenge.ts'
import { failureResponse } from '../../src/http/failure-response.ts'
import { problemResponse } from '../../src/http/problem-response.ts'

const JSON_PROBLEM = { 'content-type': 'application/problem+json', 'cache-control': 'no-store' }

function body(code: string, status: number, title: string, detail: string) {
  return {
    type: `https://tokengate.dev/problems/${code}`,
    title,
    status,
    detail,
    code,
    requestId: 'req-7',
  }
}

describe('failureResponse', () => {
  test('missing_authorization → 401, challenge with realm only (no error code)', () => {
    assert.deepEqual(failureResponse({ code: 'missing_authorization' }, 'req-7'), {
      status: 401,
      headers: { ...JSON_PROBLEM, 'www-authenticate': 'Bearer realm="tokengate"' },
      body: body(
        'missing_authorization',
        401,
        'Authorization required',
        'Send an Authorization header: "Bearer <token>".',
      ),
    })
  })

  test('malformed_authorization → 401 error="invalid_request" with the parser’s detail', () => {
    const detail = 'Exactly one space must separate "Bearer" and the token.'
    assert.deepEqual(failureResponse({ code: 'malformed_authorization', detail }, 'req-7'), {
      status: 401,
      headers: {
        ...JSON_PROBLEM,
        'www-authenticate':
          'Bearer realm="tokengate", error="invalid_request", error_description="Exactly one space must separate \\"Bearer\\" and the token."',
      },
      body: body('malformed_authorization', 401, 'Malformed Authorization header', detail),
    })
  })

  test('invalid_token → 401 error="invalid_token"; the reason stays out of the response', () => {
    const failure: AuthFailure = {
      code: 'invalid_token',
      reason: 'revoked',
      detail: 'The access token is not valid.',
    }
    const response = failureResponse(failure, 'req-7')
    assert.deepEqual(response, {
      status: 401,
      headers: {
        ...JSON_PROBLEM,
        'www-authenticate':
          'Bearer realm="tokengate", error="invalid_token", error_description="The access token is not valid."',
      },
      body: body('invalid_token', 401, 'Invalid access token', 'The access token is not valid.'),
    })
    assert.ok(!JSON.stringify(response).includes('revoked'))
  })

  test('token_expired → 401 error="invalid_token" with its own code', () => {
    const response = failureResponse(
      { code: 'token_expired', detail: 'The access token has expired.' },
      'req-7',
    )
    assert.equal(response.status, 401)
    assert.equal(response.body.code, 'token_expired')
    assert.equal(response.body.title, 'Access token expired')
    assert.equal(
      response.headers['www-authenticate'],
      'Bearer realm="tokengate", error="invalid_token", error_description="The access token has expired."',
    )
  })

  test('tenant_header_required → 401 error="invalid_token" explaining X-Tenant-Id', () => {
    const response = failureResponse({ code: 'tenant_header_required' }, 'req-7')
    assert.equal(response.status, 401)
    assert.equal(response.body.code, 'tenant_header_required')
    assert.match(response.body.detail, /X-Tenant-Id/)
    assert.match(
      response.headers['www-authenticate'] ?? '',
      /^Bearer realm="tokengate", error="invalid_token", error_description="[^"]*X-Tenant-Id/,
    )
  })

  test('tenant_mismatch → 401 error="invalid_token"', () => {
    const detail = "X-Tenant-Id does not match the token's tenant."
    const response = failureResponse({ code: 'tenant_mismatch', detail }, 'req-7')
    assert.equal(response.status, 401)
    assert.deepEqual(response.body, body('tenant_mismatch', 401, 'Tenant mismatch', detail))
    assert.equal(
      response.headers['www-authenticate'],
      `Bearer realm="tokengate", error="invalid_token", error_description="${detail}"`,
    )
  })

  test('insufficient_permission → 403 error="insufficient_scope" with scope and required', () => {
    const response = failureResponse(
      { code: 'insufficient_permission', required: ['tokens:read', 'audit:read'] },
      'req-7',
    )
    assert.deepEqual(response, {
      status: 403,
      headers: {
        ...JSON_PROBLEM,
        'www-authenticate':
          'Bearer realm="tokengate", error="insufficient_scope", scope="tokens:read audit:read"',
      },
      body: {
        ...body(
          'insufficient_permission',
          403,
          'Insufficient permission',
          'This request requires the permission(s): tokens:read audit:read.',
        ),
        required: ['tokens:read', 'audit:read'],
      },
    })
  })

  test('unavailable → 503 with Retry-After, no challenge, no dependency name', () => {
    const response = failureResponse(
      { code: 'unavailable', dependency: 'jwks', retryAfterSeconds: 5 },
      'req-7',
    )
    assert.equal(response.status, 503)
    assert.deepEqual(response.headers, { ...JSON_PROBLEM, 'retry-after': '5' })
    assert.equal(response.body.code, 'unavailable')
    assert.equal(response.body.status, 503)
    assert.ok(!JSON.stringify(response).includes('jwks'))
  })

  test('every 4xx status in the body equals the response status', () => {
    const failures: AuthFailure[] = [
      { code: 'missing_authorization' },
      { code: 'malformed_authorization', detail: 'd' },
      { code: 'invalid_token', reason: 'claims', detail: 'd' },
      { code: 'token_expired', detail: 'd' },
      { code: 'tenant_header_required' },
      { code: 'tenant_mismatch', detail: 'd' },
      { code: 'insufficient_permission', required: ['a'] },
      { code: 'unavailable', dependency: 'store', retryAfterSeconds: 1 },
    ]
    for (const failure of failures) {
      const response = failureResponse(failure, 'r')
      assert.equal(response.body.status, response.status)
      assert.equal(response.body.code, failure.code)
      assert.equal(response.headers['content-type'], 'application/problem+json')
    }
  })

  test('a detail with quotes, backslashes or line breaks cannot break the header', () => {
    const response = failureResponse(
      { code: 'invalid_token', reason: 'claims', detail: 'a"b\\c\r\nSet-Cookie: x=1\u00e9' },
      'r',
    )
    assert.equal(
      response.headers['www-authenticate'],
      'Bearer realm="tokengate", error="invalid_token", error_description="a\\"b\\\\c??Set-Cookie: x=1?"',
    )
  })

  test('the challenge memo keeps each kind apart: one text as an invalid_token and an invalid_request detail', () => {
    const text = 'The same words in two kinds of refusal.'
    const challengeOf = (failure: AuthFailure) =>
      failureResponse(failure, 'req-7').headers['www-authenticate']
    for (let round = 0; round < 2; round++) {
      assert.equal(
        challengeOf({ code: 'invalid_token', reason: 'unknown_token', detail: text }),
        bearerChallenge({ error: 'invalid_token', errorDescription: text }),
      )
      assert.equal(
        challengeOf({ code: 'invalid_request', detail: text }),
        bearerChallenge({ error: 'invalid_request', errorDescription: text }),
      )
    }
  })
})

describe('failureResponse of repeated 401s (headers made once per challenge)', () => {
  test('the same status, headers in the same order and body as problemResponse builds them', () => {
    const failures = [
      { code: 'missing_authorization' },
      { code: 'malformed_authorization', detail: 'Bad header.' },
      { code: 'invalid_token', reason: 'malformed', detail: 'The token is malformed.' },
      { code: 'token_expired', detail: 'The access token has expired.' },
      { code: 'tenant_header_required' },
      { code: 'tenant_mismatch', detail: 'Wrong tenant.' },
    ] as AuthFailure[]
    for (const failure of failures) {
      const first = failureResponse(failure, 'req-1')
      const again = failureResponse(failure, 'req-2')
      const built = problemResponse(first.body.code, first.body.detail, 'req-2', {
        headers: { 'www-authenticate': first.headers['www-authenticate'] as string },
      })
      assert.equal(JSON.stringify(again), JSON.stringify(built), failure.code)
      assert.equal(first.body.requestId, 'req-1')
    }
  })

  test('the shared headers cannot be changed through one answer', () => {
    const failure = { code: 'token_expired', detail: 'Expired.' } as AuthFailure
    const one = failureResponse(failure, 'req-1')
    assert.throws(() => {
      one.headers['x-extra'] = 'no'
    }, TypeError)
    assert.equal(failureResponse(failure, 'req-2').headers['x-extra'], undefined)
  })
})

describe('challenge', () => {
  test('quoteString escapes " and \\ and replaces non-printable or non-ASCII characters', () => {
    assert.equal(quoteString('plain'), '"plain"')
    assert.equal(quoteString('say "hi" \\o/'), '"say \\"hi\\" \\\\o/"')
    assert.equal(quoteString('tab\there\nü'), '"tab?here??"')
    assert.equal(quoteString(''), '""')
  })

  test('bearerChallenge orders realm, error, error_description, scope', () => {
    assert.equal(bearerChallenge(), 'Bearer realm="tokengate"')
    assert.equal(
      bearerChallenge({ error: 'insufficient_scope', errorDescription: 'd', scope: 'a b' }),
      'Bearer realm="tokengate", error="insufficient_scope", error_description="d", scope="a b"',
    )
  })
})
