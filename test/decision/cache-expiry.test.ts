/**
 * What a proxy may keep (src/decision/cache-expiry.ts): an allow of a built-in kind until the
 * end of the second after the last change-log read, less the margin; nothing else.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { Principal } from '../../src/core/principal.ts'
import { APPLY_MARGIN_MS, createCacheExpiry } from '../../src/decision/cache-expiry.ts'
import type { Answer } from '../../src/decision/decide.ts'

const principal: Principal = {
  tokenType: 'pat',
  tenantId: 't',
  subject: 's',
  permissions: [],
  tokenId: 'tok_1',
  expiresAt: null,
  fingerprint: 'f',
}

const allow = (
  over: Partial<Principal> = {},
  identity: Record<string, string> = { 'x-auth-subject': 's' },
): Answer => ({
  type: 'allow',
  outcome: { allowed: true, principal: { ...principal, ...over }, headers: {}, identity },
  upstream: identity,
  remove: [],
  client: {},
})

/** 12:00:00.400 on some day, in epoch ms. */
const NOW = 1_800_000_000_400

function expiry(readAsOf: number | undefined, now = NOW, settled = () => true) {
  const nudges: number[] = []
  const of = createCacheExpiry(
    { readAsOf: () => readAsOf, catchUp: () => void nudges.push(now), settled },
    () => now,
  )
  return { of, nudges }
}

describe('decision cache expiry', () => {
  test('an allow read this second is kept until the end of that second', () => {
    const { of, nudges } = expiry(NOW - 100)
    assert.equal(of(allow()), `@${Math.floor(NOW / 1000)}`)
    assert.equal(of(allow({ tokenType: 'jwt' })), `@${Math.floor(NOW / 1000)}`)
    assert.deepEqual(nudges, [])
  })

  test('a read older than this second (less the margin) is not kept, and asks for a read', () => {
    const second = Math.floor(NOW / 1000) * 1000
    const { of, nudges } = expiry(second + APPLY_MARGIN_MS - 1)
    assert.equal(of(allow()), '0')
    assert.equal(nudges.length, 1)
    assert.equal(of(allow()), '0')
    assert.equal(nudges.length, 1, 'one nudge at a time')
  })

  test('nothing is kept while the change log cannot be read', () => {
    assert.equal(expiry(undefined).of(allow()), '0')
  })

  test('nothing is kept while a change is still being applied (policy, issuer, JWT rule read)', () => {
    let settled = false
    const { of } = expiry(NOW - 100, NOW, () => settled)
    assert.equal(of(allow()), '0')
    settled = true
    assert.equal(of(allow()), `@${Math.floor(NOW / 1000)}`)
  })

  test('never kept: refusals, identity tokens, keys with limits, other kinds', () => {
    const { of } = expiry(NOW)
    const refusal = { type: 'refuse', outcome: undefined, response: {} } as unknown as Answer
    assert.equal(of(refusal), '0')
    assert.equal(of(allow({}, { 'x-auth-token': 'eyJ...' })), '0')
    assert.equal(of(allow({ limits: { rateLimit: { max: 1, windowMs: 1 } } as never })), '0')
    assert.equal(of(allow({ tokenType: 'api-key' })), '0')
    assert.equal(of(allow({ tokenType: 'mtls' })), '0')
  })

  test("never past the credential's own expiry", () => {
    const { of } = expiry(NOW)
    assert.equal(of(allow({ expiresAt: NOW + 300 })), '0')
    assert.equal(of(allow({ expiresAt: NOW + 1_600 })), `@${Math.floor(NOW / 1000)}`)
  })
})
