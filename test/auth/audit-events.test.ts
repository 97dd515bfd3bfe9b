/**
 * The audit records of refusals (`authFailureRecord`) and of every other event (`auditRecord`),
 * compared as JSON text: the values, and the keys in the order the spool lines have them.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { auditRecord, authFailureRecord } from '../../src/auth/audit-events.ts'
import type { AuthFailure } from '../../src/core/failure.ts'

const request = {
  actor: 'pat_…abcd',
  clientAddress: '10.0.0.1',
  requestId: 'req-1',
  method: 'GET',
  url: '/api/v1/me?access_token=secret&x=1',
  tenantId: 'acme',
}
const anonymous = { actor: null, method: 'POST', url: '/decision', tenantId: null }

const record = (failure: AuthFailure, by: typeof request | typeof anonymous = request) =>
  JSON.stringify(authFailureRecord(failure, by))

describe('authFailureRecord', () => {
  it('a 401 is auth.failed with method and path (query dropped), the reason for invalid_token', () => {
    assert.equal(
      record({ code: 'missing_authorization' }),
      '{"type":"auth.failed","tenantId":"acme","actor":"pat_…abcd","outcome":"missing_authorization","clientAddress":"10.0.0.1","requestId":"req-1","details":{"method":"GET","path":"/api/v1/me"}}',
    )
    assert.equal(
      record({ code: 'invalid_token', reason: 'unknown_token', detail: 'x' } as AuthFailure),
      '{"type":"auth.failed","tenantId":"acme","actor":"pat_…abcd","outcome":"invalid_token","clientAddress":"10.0.0.1","requestId":"req-1","details":{"method":"GET","path":"/api/v1/me","reason":"unknown_token"}}',
    )
    assert.equal(
      record({
        code: 'invalid_token',
        reason: 'revoked_by_rule',
        ruleId: 'rule-9',
        detail: 'x',
      } as AuthFailure),
      '{"type":"auth.failed","tenantId":"acme","actor":"pat_…abcd","outcome":"invalid_token","clientAddress":"10.0.0.1","requestId":"req-1","details":{"method":"GET","path":"/api/v1/me","reason":"revoked_by_rule","rule":"rule-9"}}',
    )
  })

  it('without address or request id: nulls', () => {
    assert.equal(
      record({ code: 'token_expired' } as AuthFailure, anonymous),
      '{"type":"auth.failed","tenantId":null,"actor":null,"outcome":"token_expired","clientAddress":null,"requestId":null,"details":{"method":"POST","path":"/decision"}}',
    )
  })

  it('a permission or policy refusal is auth.forbidden, with the policy line when known', () => {
    assert.equal(
      record({ code: 'insufficient_permission', required: ['a:b'] } as AuthFailure),
      '{"type":"auth.forbidden","tenantId":"acme","actor":"pat_…abcd","outcome":"insufficient_permission","clientAddress":"10.0.0.1","requestId":"req-1","details":{"method":"GET","path":"/api/v1/me"}}',
    )
    assert.equal(
      record({ code: 'route_denied', policyLine: 7 } as AuthFailure),
      '{"type":"auth.forbidden","tenantId":"acme","actor":"pat_…abcd","outcome":"gateway_deny","clientAddress":"10.0.0.1","requestId":"req-1","details":{"method":"GET","path":"/api/v1/me","policyLine":7}}',
    )
    assert.equal(
      record({ code: 'tenant_path_mismatch', policyLine: 2 } as AuthFailure),
      '{"type":"auth.forbidden","tenantId":"acme","actor":"pat_…abcd","outcome":"gateway_tenant_mismatch","clientAddress":"10.0.0.1","requestId":"req-1","details":{"method":"GET","path":"/api/v1/me","policyLine":2}}',
    )
  })

  it('no record for a 503, a 429 or an ambiguous path', () => {
    for (const code of ['unavailable', 'rate_limited', 'quota_exhausted', 'bad_path']) {
      assert.equal(authFailureRecord({ code } as AuthFailure, request), undefined, code)
    }
  })
})

describe('authFailureRecord over a flood (details kept from the last refusal)', () => {
  it('each record has its own request id and the details of its own method, path, reason and rule', () => {
    const failed = (
      url: string,
      method: string,
      reason?: string,
      ruleId?: string,
      requestId = 'r',
    ) =>
      JSON.stringify(
        authFailureRecord(
          (reason === undefined
            ? { code: 'token_expired' }
            : { code: 'invalid_token', reason, ruleId, detail: 'x' }) as AuthFailure,
          { ...request, url, method, requestId },
        ),
      )
    const at = (path: string, more = '') =>
      `{"type":"auth.failed","tenantId":"acme","actor":"pat_…abcd","outcome":"${more ? 'invalid_token' : 'token_expired'}","clientAddress":"10.0.0.1","requestId":"r","details":{"method":"GET","path":"${path}"${more}}}`
    assert.equal(failed('/a', 'GET', 'malformed'), at('/a', ',"reason":"malformed"'))
    assert.equal(failed('/a', 'GET', 'malformed'), at('/a', ',"reason":"malformed"'))
    assert.equal(
      failed('/a', 'GET', 'malformed', undefined, 'r2'),
      at('/a', ',"reason":"malformed"').replace('"r"', '"r2"'),
    )
    assert.equal(failed('/a', 'GET', 'unknown_token'), at('/a', ',"reason":"unknown_token"'))
    assert.equal(
      failed('/a', 'GET', 'revoked_by_rule', 'rule-1'),
      at('/a', ',"reason":"revoked_by_rule","rule":"rule-1"'),
    )
    assert.equal(
      failed('/a', 'GET', 'revoked_by_rule', 'rule-2'),
      at('/a', ',"reason":"revoked_by_rule","rule":"rule-2"'),
    )
    assert.equal(failed('/a', 'GET'), at('/a'))
    assert.equal(failed('/a', 'POST'), at('/a').replace('"GET"', '"POST"'))
    assert.equal(failed('/b/pat_secret?x=1', 'GET'), at('/b/[redacted]'))
    assert.equal(failed('/a', 'GET'), at('/a'))
  })

  it('the kept details cannot be changed through a record', () => {
    const one = authFailureRecord({ code: 'token_expired' } as AuthFailure, request)
    assert.throws(() => {
      ;(one?.details as { path: string }).path = '/changed'
    }, TypeError)
    const two = authFailureRecord({ code: 'token_expired' } as AuthFailure, request)
    assert.equal(two?.details.path, '/api/v1/me')
  })
})

describe('auditRecord', () => {
  const event = { type: 'pat.revoked', tenantId: 't', details: { tokenId: 'i' } } as const

  it('outcome ok unless the event has one; time first when given', () => {
    assert.equal(
      JSON.stringify(auditRecord(event, { actor: 'cli:me' })),
      '{"type":"pat.revoked","tenantId":"t","actor":"cli:me","outcome":"ok","clientAddress":null,"requestId":null,"details":{"tokenId":"i"}}',
    )
    assert.equal(
      JSON.stringify(auditRecord(event, { actor: 'cli:me', requestId: 'r' }, 123)),
      '{"time":123,"type":"pat.revoked","tenantId":"t","actor":"cli:me","outcome":"ok","clientAddress":null,"requestId":"r","details":{"tokenId":"i"}}',
    )
  })
})
