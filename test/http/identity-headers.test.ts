/**
 * The identity headers of a principal, and their bounded memo (issue #36): a caller's headers
 * are built once and shared, but an entry answers only for a principal with the same
 * tenant, subject, token type, token id and permission list; anything else gets its own.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { Principal } from '../../src/core/principal.ts'
import { identityHeaders } from '../../src/http/identity-headers.ts'

const PERMISSIONS = ['projects:read', 'a,b'] as const

function pat(overrides: Partial<Principal> = {}): Principal {
  return {
    tokenType: 'pat',
    tenantId: 'acme',
    subject: 'user-1',
    permissions: PERMISSIONS,
    tokenId: 'tok_1',
    expiresAt: null,
    fingerprint: 'fp',
    ...overrides,
  }
}

/** What the headers must be, written out independently of the memo. */
function expected(principal: Principal): Record<string, string> {
  const encode = (value: string) =>
    /^[\x21-\x24\x26-\x7e]*$/.test(value) ? value : encodeURIComponent(value)
  return {
    'x-auth-tenant': encode(principal.tenantId),
    'x-auth-subject': encode(principal.subject),
    'x-auth-token-type': principal.tokenType,
    ...(principal.tokenId === undefined ? {} : { 'x-auth-token-id': encode(principal.tokenId) }),
    'x-auth-permissions': principal.permissions
      .map((p) => (p.includes(',') ? p.replaceAll(',', '%2C') : p))
      .join(','),
  }
}

describe('identity headers', () => {
  it('are the principal’s values, encoded; one object shared by equal principals, frozen', () => {
    const first = identityHeaders(pat())
    assert.deepEqual({ ...first }, expected(pat()))
    assert.equal(identityHeaders(pat()), first, 'a second request of the same caller reuses them')
    assert.ok(Object.isFrozen(first))
    assert.throws(() => {
      ;(first as Record<string, string>)['x-auth-tenant'] = 'other'
    }, TypeError)
    const jwt = pat({ tokenType: 'jwt', tokenId: undefined, subject: 'line\r\nbreak ü' })
    assert.deepEqual({ ...identityHeaders(jwt) }, expected(jwt))
    assert.equal('x-auth-token-id' in identityHeaders(jwt), false)
  })

  it('a principal differing in one field from the remembered one under its key gets its own', () => {
    // Each pair shares the memo's key (token id, or subject without one) and differs in one field.
    const jwtWithoutId = pat({ tokenType: 'jwt', tokenId: undefined, subject: 'sub-9' })
    const pairs: [Principal, Principal][] = [
      [pat(), pat({ tenantId: 'globex' })],
      [pat(), pat({ subject: 'user-2' })],
      [pat(), pat({ tokenType: 'jwt' })],
      [pat(), pat({ permissions: ['projects:write'] })],
      // Same contents, another list: answered right either way.
      [pat(), pat({ permissions: [...PERMISSIONS] })],
      [jwtWithoutId, { ...jwtWithoutId, tokenId: 'sub-9' }],
      [pat(), pat({ tenantId: 'a b\u0000' })],
    ]
    for (const [base, variant] of pairs) {
      for (let round = 0; round < 2; round++) {
        for (const principal of [base, variant]) {
          assert.deepEqual({ ...identityHeaders(principal) }, expected(principal))
        }
      }
    }
  })

  it('the memo is bounded: past 1,024 other callers the first one is built again, still right', () => {
    const first = identityHeaders(pat({ tokenId: 'tok_bound' }))
    for (let i = 0; i < 1_100; i++) {
      const principal = pat({ tokenId: `tok_other_${i}`, tenantId: `t${i}` })
      assert.deepEqual({ ...identityHeaders(principal) }, expected(principal))
    }
    const again = identityHeaders(pat({ tokenId: 'tok_bound' }))
    assert.notEqual(again, first, 'evicted, so rebuilt')
    assert.deepEqual(again, first)
  })
})
