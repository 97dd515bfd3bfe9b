import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { authorize } from '../../src/core/authorize.ts'
import { holdsAll, missingPermissions } from '../../src/core/permissions.ts'
import type { Principal } from '../../src/core/principal.ts'

function principal(permissions: readonly string[]): Principal {
  return {
    tokenType: 'pat',
    tenantId: 'acme',
    subject: 'ci-bot',
    permissions,
    tokenId: 'tok_1',
    expiresAt: null,
    fingerprint: 'pat_…abcd',
  }
}

describe('authorize', () => {
  test('nothing required → allowed, even with no permissions', () => {
    assert.equal(authorize(principal([]), []), undefined)
  })

  test('every required permission held → allowed', () => {
    const caller = principal(['audit:read', 'tokens:read', 'tokens:revoke'])
    assert.equal(authorize(caller, ['tokens:read', 'audit:read']), undefined)
  })

  test('one of two required permissions missing → insufficient_permission with all required', () => {
    assert.deepEqual(authorize(principal(['tokens:read']), ['tokens:read', 'audit:read']), {
      code: 'insufficient_permission',
      required: ['tokens:read', 'audit:read'],
    })
  })

  test('matching is exact: no case folding, wildcards, prefixes or trimming', () => {
    for (const held of ['Tokens:read', 'tokens:*', '*', 'tokens', 'tokens:read ', 'tokens:rea']) {
      assert.equal(
        authorize(principal([held]), ['tokens:read'])?.code,
        'insufficient_permission',
        held,
      )
    }
  })

  test('the failure does not alias the caller’s array', () => {
    const required = ['audit:read']
    const failure = authorize(principal([]), required)
    required.push('x')
    assert.deepEqual(failure, { code: 'insufficient_permission', required: ['audit:read'] })
  })
})

describe('permissions', () => {
  test('missingPermissions keeps the required order and only the missing ones', () => {
    assert.deepEqual(missingPermissions(['b'], ['a', 'b', 'c']), ['a', 'c'])
    assert.deepEqual(missingPermissions([], []), [])
  })

  test('holdsAll is true only when nothing is missing', () => {
    assert.equal(holdsAll(['a', 'b'], ['b', 'a']), true)
    assert.equal(holdsAll(['a'], ['a', 'b']), false)
  })
})
