import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, test } from 'node:test'
import fc from 'fast-check'
import { type CachedJwt, createJwtCache } from '../../src/core/jwt-cache.ts'
import type { VerifiedJwt } from '../../src/core/ports.ts'

const jwt = (subject: string): VerifiedJwt => ({
  issuer: 'https://issuer.test',
  subject,
  tenantId: 't',
  permissions: [],
  tokenId: undefined,
  expiresAt: 2000_000,
  keyId: undefined,
})
const entry = (subject: string, expSec = 2000, notBeforeSec?: number): CachedJwt => ({
  jwt: jwt(subject),
  expSec,
  notBeforeSec,
})

describe('verified-token cache', () => {
  test('keys are SHA-256 digests (hex, like the server token digest), not tokens', () => {
    const cache = createJwtCache(10)
    const key = cache.keyOf('header.payload.signature')
    const expected = createHash('sha256').update('header.payload.signature').digest('hex')
    assert.equal(key, expected)
    assert.equal(key.includes('payload'), false)
  })

  test('an entry is served while exp > now - tolerance, and dropped at that instant', () => {
    const cache = createJwtCache(10)
    const value = entry('a', 2000)
    cache.set('k', value)
    assert.equal(cache.get('k', 2_029_000, 30), value.jwt)
    assert.equal(cache.get('k', 2_030_000, 30), undefined)
    assert.equal(cache.size, 0)
  })

  test('an entry is not served before its nbf/iat (minus tolerance), but is kept', () => {
    const cache = createJwtCache(10)
    const value = entry('a', 2000, 1000)
    cache.set('k', value)
    assert.equal(cache.get('k', 969_000, 30), undefined)
    assert.equal(cache.get('k', 970_000, 30), value.jwt)
    assert.equal(cache.size, 1)
  })

  test('the cache never holds more than maxEntries, whatever the sequence of operations', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 30 })), { maxLength: 200 }),
        (maxEntries, operations) => {
          const cache = createJwtCache(maxEntries)
          for (const [isSet, n] of operations) {
            if (isSet) cache.set(`k${n}`, entry(`k${n}`))
            else cache.get(`k${n}`, 1_000_000, 0)
            assert.ok(cache.size <= maxEntries)
          }
        },
      ),
    )
  })

  test('the last entry set is always cached, and an entry is evicted after maxEntries newer ones', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 12 }), (maxEntries) => {
        const cache = createJwtCache(maxEntries)
        cache.set('first', entry('first'))
        for (let i = 0; i < maxEntries; i++) {
          cache.set(`k${i}`, entry(`k${i}`))
          assert.equal(cache.get(`k${i}`, 1_000_000, 0)?.subject, `k${i}`)
        }
        assert.equal(cache.get('first', 1_000_000, 0), undefined)
      }),
    )
  })

  test('a recently used entry outlives older unused ones (least recently used evicted first)', () => {
    const cache = createJwtCache(10)
    for (const k of ['a', 'b', 'c', 'd', 'e']) cache.set(k, entry(k))
    assert.equal(cache.get('a', 1_000_000, 0)?.subject, 'a')
    for (const k of ['f', 'g', 'h', 'i']) cache.set(k, entry(k))
    assert.equal(cache.get('a', 1_000_000, 0)?.subject, 'a')
    assert.equal(cache.get('b', 1_000_000, 0), undefined)
    for (const k of ['f', 'g', 'h', 'i']) assert.equal(cache.get(k, 1_000_000, 0)?.subject, k)
  })

  test("an entry is served while its key's validity lasts, asking for a key set read once due; a withdrawn key (0) stops it at once", () => {
    const cache = createJwtCache(10)
    let rechecks = 0
    const validity = { recheckAtMs: 1_500_000, validUntilMs: 1_800_000, recheck: () => rechecks++ }
    const value: CachedJwt = { ...entry('a'), validity }
    cache.set('k', value)
    assert.equal(cache.get('k', 1_499_999, 0), value.jwt)
    assert.equal(rechecks, 0, 'no look at the key source before it is due')
    assert.equal(cache.get('k', 1_500_000, 0), value.jwt, 'due: still served')
    assert.equal(rechecks, 1, '... while the key set is read in the background')
    assert.equal(cache.get('k', 1_800_000, 0), undefined, 'past the keys usable life: verify again')
    Object.assign(validity, { recheckAtMs: 1_900_000, validUntilMs: 2_000_000 }) // read again
    assert.equal(cache.get('k', 1_800_000, 0), value.jwt)
    Object.assign(validity, { recheckAtMs: 0, validUntilMs: 0 }) // a read dropped the key
    assert.equal(cache.get('k', 1_800_001, 0), undefined)
    assert.equal(rechecks, 1)
    cache.set('k', entry('a'))
    assert.equal(cache.get('k', 1_800_001, 0)?.subject, 'a', 'a static key has no validity')
  })

  test('maxEntries 0 stores nothing; clear() empties', () => {
    const none = createJwtCache(0)
    none.set('a', entry('a'))
    assert.equal(none.size, 0)
    const cache = createJwtCache(5)
    cache.set('a', entry('a'))
    cache.clear()
    assert.equal(cache.get('a', 1_000_000, 0), undefined)
  })
})
