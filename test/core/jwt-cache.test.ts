import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, test } from 'node:test'
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
  test('keys are SHA-256 digests, not tokens', () => {
    const cache = createJwtCache(10)
    const key = cache.keyOf('header.payload.signature')
    const expected = createHash('sha256').update('header.payload.signature').digest('base64url')
    assert.equal(key, expected)
    assert.equal(key.includes('payload'), false)
  })

  test('an entry is served while exp > now - tolerance, and dropped at that instant', () => {
    const cache = createJwtCache(10)
    const value = entry('a', 2000)
    cache.set('k', value)
    assert.equal(cache.get('k', 2029, 30), value.jwt)
    assert.equal(cache.get('k', 2030, 30), undefined)
    assert.equal(cache.size, 0)
  })

  test('an entry is not served before its nbf/iat (minus tolerance), but is kept', () => {
    const cache = createJwtCache(10)
    const value = entry('a', 2000, 1000)
    cache.set('k', value)
    assert.equal(cache.get('k', 969, 30), undefined)
    assert.equal(cache.get('k', 970, 30), value.jwt)
    assert.equal(cache.size, 1)
  })

  test('the cache holds at most maxEntries, evicting the least recently used', () => {
    const cache = createJwtCache(3)
    for (const k of ['a', 'b', 'c']) cache.set(k, entry(k))
    cache.get('a', 1000, 0)
    cache.set('d', entry('d'))
    assert.equal(cache.size, 3)
    assert.equal(cache.get('b', 1000, 0), undefined)
    for (const k of ['a', 'c', 'd']) assert.equal(cache.get(k, 1000, 0)?.subject, k)
    for (let i = 0; i < 100; i++) cache.set(`x${i}`, entry('x'))
    assert.equal(cache.size, 3)
  })

  test('maxEntries 0 stores nothing; clear() empties', () => {
    const none = createJwtCache(0)
    none.set('a', entry('a'))
    assert.equal(none.size, 0)
    const cache = createJwtCache(5)
    cache.set('a', entry('a'))
    cache.clear()
    assert.equal(cache.get('a', 1000, 0), undefined)
  })
})
