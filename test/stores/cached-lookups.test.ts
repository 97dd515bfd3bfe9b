import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import type { AuthLookups, PatRecord, Tenant } from '../../src/core/ports.ts'
import { createCachedLookups } from '../../src/stores/cached-lookups.ts'
import { Interner, PackedSlots, PatColumns } from '../../src/stores/packed-lookup-slots.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { testClock } from '../helpers/clock.ts'

const T0 = Date.UTC(2026, 0, 1)

function hashOf(name: string): string {
  return createHash('sha256').update(name).digest('hex')
}

function pat(name: string, revokedAt: number | null = null): PatRecord {
  return {
    id: name,
    tokenHash: hashOf(name),
    tenantId: 'acme',
    subject: 'alice',
    name,
    permissions: [],
    last4: 'abcd',
    createdAt: T0,
    expiresAt: null,
    revokedAt,
    lastUsedAt: null,
    rotatedFrom: null,
  }
}

/** What a cached record always carries (null) when the store's record left it out. */
const ABSENT = {
  supersededAt: null,
  graceUntil: null,
  disabledAt: null,
  rateLimit: null,
  quota: null,
  metadata: null,
  externalId: null,
  certificateThumbprint: null,
}

/** An in-memory AuthLookups that counts calls; `pats` and `tenants` may be changed by tests. */
function countingLookups(initial: PatRecord[] = [], tenantList: Tenant[] = []) {
  const pats = new Map(initial.map((p) => [p.tokenHash, p]))
  const tenants = new Map(tenantList.map((t) => [t.id, t]))
  const calls = { pats: 0, tenants: 0 }
  const lookups: AuthLookups = {
    async findPatByHash(hash) {
      calls.pats++
      return pats.get(hash)
    },
    async findTenant(id) {
      calls.tenants++
      return tenants.get(id)
    },
  }
  return { lookups, pats, tenants, calls }
}

/** Like `countingLookups`, but every lookup throws while `down` is true. */
function failingLookups(initial: PatRecord[] = [], tenantList: Tenant[] = []) {
  const base = countingLookups(initial, tenantList)
  const state = {
    ...base,
    down: false,
    lookups: {
      findPatByHash: async (hash: string) => {
        base.calls.pats++
        if (state.down) throw new Error('store down')
        return base.pats.get(hash)
      },
      findTenant: async (id: string) => {
        base.calls.tenants++
        if (state.down) throw new Error('store down')
        return base.tenants.get(id)
      },
    } satisfies AuthLookups,
  }
  return state
}

function deferred<T>() {
  let resolve!: (value: T) => void
  let reject!: (error: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

const acme: Tenant = { id: 'acme', name: 'Acme', enabled: true, createdAt: T0 }

describe('cached lookups', () => {
  it('serves a found PAT from memory until the TTL passes, then asks again', async () => {
    const clock = testClock(T0)
    const inner = countingLookups([pat('a')])
    const cache = createCachedLookups(inner.lookups, { ttlMs: 2000, clock })
    assert.equal((await cache.findPatByHash(hashOf('a')))?.id, 'a')
    clock.advance(1999)
    assert.equal((await cache.findPatByHash(hashOf('a')))?.id, 'a')
    assert.equal(inner.calls.pats, 1)
    clock.advance(1)
    assert.equal((await cache.findPatByHash(hashOf('a')))?.id, 'a')
    assert.equal(inner.calls.pats, 2)
    assert.deepEqual(cache.stats(), { hits: 1, misses: 2, size: 1, stale: 0 })
  })

  it('remembers an unknown hash for the shorter negative TTL', async () => {
    const clock = testClock(T0)
    const inner = countingLookups()
    const cache = createCachedLookups(inner.lookups, { ttlMs: 2000, negativeTtlMs: 300, clock })
    assert.equal(await cache.findPatByHash(hashOf('x')), undefined)
    clock.advance(299)
    assert.equal(await cache.findPatByHash(hashOf('x')), undefined)
    assert.equal(inner.calls.pats, 1)
    clock.advance(1)
    inner.pats.set(hashOf('x'), pat('x'))
    assert.equal((await cache.findPatByHash(hashOf('x')))?.id, 'x')
    assert.equal(inner.calls.pats, 2)
  })

  it('defaults the negative TTL to 500 ms', async () => {
    const clock = testClock(T0)
    const inner = countingLookups()
    const cache = createCachedLookups(inner.lookups, { clock })
    await cache.findPatByHash(hashOf('x'))
    clock.advance(499)
    await cache.findPatByHash(hashOf('x'))
    assert.equal(inner.calls.pats, 1)
    clock.advance(1)
    await cache.findPatByHash(hashOf('x'))
    assert.equal(inner.calls.pats, 2)
  })

  it('a flood of unknown tokens stays bounded and does not evict real tokens', async () => {
    const clock = testClock(T0)
    const inner = countingLookups([pat('real')])
    const cache = createCachedLookups(inner.lookups, {
      maxEntries: 5,
      maxNegativeEntries: 10,
      clock,
    })
    await cache.findPatByHash(hashOf('real'))
    for (let i = 0; i < 1000; i++) await cache.findPatByHash(hashOf(`junk-${i}`))
    assert.equal(cache.stats().size, 11)
    const before = inner.calls.pats
    assert.equal((await cache.findPatByHash(hashOf('real')))?.id, 'real')
    assert.equal(inner.calls.pats, before, 'the real token is still cached')
    // The newest unknown ones are kept, the oldest were evicted.
    await cache.findPatByHash(hashOf('junk-999'))
    assert.equal(inner.calls.pats, before)
    await cache.findPatByHash(hashOf('junk-0'))
    assert.equal(inner.calls.pats, before + 1)
  })

  it('evicts the least recently used found entry beyond maxEntries', async () => {
    const clock = testClock(T0)
    const inner = countingLookups([pat('a'), pat('b'), pat('c')])
    const cache = createCachedLookups(inner.lookups, { maxEntries: 2, clock })
    await cache.findPatByHash(hashOf('a'))
    await cache.findPatByHash(hashOf('b'))
    // Recency is refreshed at most once per second per entry (approximate LRU).
    clock.advance(1000)
    await cache.findPatByHash(hashOf('a')) // a is now more recent than b
    await cache.findPatByHash(hashOf('c')) // evicts b
    assert.equal(inner.calls.pats, 3)
    await cache.findPatByHash(hashOf('a'))
    await cache.findPatByHash(hashOf('c'))
    assert.equal(inner.calls.pats, 3)
    await cache.findPatByHash(hashOf('b'))
    assert.equal(inner.calls.pats, 4)
  })

  it('refreshes recency at most once per second (approximate LRU), still bounded', async () => {
    const clock = testClock(T0)
    const inner = countingLookups([pat('a'), pat('b'), pat('c')])
    const cache = createCachedLookups(inner.lookups, { maxEntries: 2, clock })
    await cache.findPatByHash(hashOf('a'))
    await cache.findPatByHash(hashOf('b'))
    clock.advance(999)
    await cache.findPatByHash(hashOf('a')) // within a second of its insert: not moved
    await cache.findPatByHash(hashOf('c')) // evicts a, the oldest insert
    assert.equal(inner.calls.pats, 3)
    assert.equal(cache.stats().size, 2)
    await cache.findPatByHash(hashOf('b'))
    await cache.findPatByHash(hashOf('c'))
    assert.equal(inner.calls.pats, 3)
    await cache.findPatByHash(hashOf('a'))
    assert.equal(inner.calls.pats, 4)
  })

  it('a cached PAT has the store record’s values, frozen with its permissions (shared)', async () => {
    const clock = testClock(T0)
    const a = { ...pat('a'), permissions: ['tokens:read', 'audit:read'], expiresAt: T0 + 9 }
    const b = {
      ...pat('b'),
      permissions: ['tokens:read', 'audit:read'],
      revokedAt: T0 + 1,
      lastUsedAt: T0 + 2,
      rotatedFrom: 'tok_old',
      supersededAt: T0 + 3,
      graceUntil: T0 + 4,
      disabledAt: T0 + 5,
      rateLimit: { max: 3, windowSec: 9 },
      quota: { limit: 7, refill: 'daily' as const, counter: 'b' },
      metadata: { plan: 'pro' },
      externalId: 'cus_9',
      certificateThumbprint: 'lEIq3-ZRHtP3l5kJ2S5sFj2e2Ak4WaWfG9rnh3ZgT1c',
    }
    const inner = countingLookups([a, b])
    const cache = createCachedLookups(inner.lookups, { clock })
    await cache.findPatByHash(hashOf('a'))
    await cache.findPatByHash(hashOf('b'))
    const cachedA = await cache.findPatByHash(hashOf('a'))
    const cachedB = await cache.maybeSync.findPatByHash(hashOf('b'))
    assert.equal(inner.calls.pats, 2)
    // The optional fields are always present on a cached record (null when absent).
    assert.deepEqual(cachedA, { ...a, ...ABSENT })
    assert.deepEqual(cachedB, b)
    assert.ok(Object.isFrozen(cachedA?.permissions))
    assert.equal(cachedA?.permissions, (cachedB as PatRecord).permissions)
    // A caller cannot change what the next caller is given: the record is frozen.
    assert.ok(Object.isFrozen(cachedA) && Object.isFrozen(cachedB))
    assert.throws(() => {
      ;(cachedA as { revokedAt: number | null }).revokedAt = T0
    }, TypeError)
    const again = await cache.findPatByHash(hashOf('a'))
    assert.equal(again?.revokedAt, null)
    assert.deepEqual(again, { ...a, ...ABSENT })
    // The store's own objects are neither shared nor frozen by the cache.
    assert.notEqual(cachedA?.permissions, a.permissions)
    assert.ok(!Object.isFrozen(a.permissions))
  })

  it('a slot freed by eviction or invalidation carries nothing over to the next PAT in it', async () => {
    const clock = testClock(T0)
    const rotated = {
      ...pat('rotated'),
      rotatedFrom: 'tok_prev',
      revokedAt: T0 + 1,
      supersededAt: T0 + 2,
      graceUntil: T0 + 3,
      disabledAt: T0 + 4,
      quota: { limit: 1, refill: 'none' as const, counter: 'rotated' },
      externalId: 'x',
      certificateThumbprint: 'lEIq3-ZRHtP3l5kJ2S5sFj2e2Ak4WaWfG9rnh3ZgT1c',
    }
    const wrongHash = { ...pat('wrong'), tokenHash: hashOf('elsewhere') }
    const plain = ['p1', 'p2', 'p3'].map((name) => pat(name))
    const records = new Map([
      [hashOf('rotated'), rotated],
      [hashOf('wrong'), wrongHash],
      ...plain.map((record) => [record.tokenHash, record] as const),
    ])
    const cache = createCachedLookups(
      { findPatByHash: async (hash) => records.get(hash), findTenant: async () => undefined },
      { clock, maxEntries: 2 },
    )
    await cache.findPatByHash(hashOf('rotated'))
    await cache.findPatByHash(hashOf('wrong'))
    // Both evicted; their slots are reused by p1 and p2.
    await cache.findPatByHash(hashOf('p1'))
    await cache.findPatByHash(hashOf('p2'))
    for (const record of plain.slice(0, 2)) {
      assert.deepEqual(await cache.maybeSync.findPatByHash(record.tokenHash), {
        ...record,
        ...ABSENT,
      })
    }
    cache.invalidatePat(hashOf('p1'))
    await cache.findPatByHash(hashOf('p3'))
    assert.deepEqual(await cache.maybeSync.findPatByHash(hashOf('p3')), {
      ...plain[2],
      ...ABSENT,
    })
    assert.equal(cache.stats().size, 2)
  })

  it('a PAT read again from the store is served as read, never as an earlier hit built it', async () => {
    const clock = testClock(T0)
    const inner = countingLookups([pat('a'), pat('b')])
    const cache = createCachedLookups(inner.lookups, { clock, ttlMs: 1000 })
    await cache.findPatByHash(hashOf('a'))
    await cache.findPatByHash(hashOf('b'))
    assert.equal(
      cache.maybeSync.findPatByHash(hashOf('a')),
      cache.maybeSync.findPatByHash(hashOf('a')),
    )
    const changes: [string, Partial<PatRecord>][] = [
      ['a', { revokedAt: T0 + 7 }],
      ['b', { disabledAt: T0 + 8, subject: 'bob', lastUsedAt: T0 + 9 }],
      ['a', { revokedAt: null, expiresAt: T0 + 5, permissions: ['tokens:read'] }],
    ]
    for (const [name, change] of changes) {
      const changed = { ...(inner.pats.get(hashOf(name)) as PatRecord), ...change }
      inner.pats.set(hashOf(name), changed)
      // Each way a cached entry is read again: invalidated (a change notice), or expired.
      if (name === 'a') cache.invalidatePat(hashOf(name))
      else clock.advance(1001)
      await cache.findPatByHash(hashOf(name))
      assert.deepEqual(cache.maybeSync.findPatByHash(hashOf(name)), { ...ABSENT, ...changed })
    }
    // The same key written again in place (PackedSlots.set on a held key).
    const slots = new PackedSlots(4, new PatColumns(new Interner()))
    slots.set(hashOf('c'), pat('c'), T0 + 1000, T0)
    const first = slots.get(hashOf('c'), T0)
    assert.equal(slots.get(hashOf('c'), T0), first)
    slots.set(hashOf('c'), { ...pat('c'), name: 'renamed', revokedAt: T0 }, T0 + 1000, T0)
    assert.deepEqual(slots.get(hashOf('c'), T0), {
      ...ABSENT,
      ...pat('c'),
      name: 'renamed',
      revokedAt: T0,
    })
  })

  it('ids, subjects and last4s of any length and alphabet come back as stored, through slot reuse', async () => {
    const clock = testClock(T0)
    const records = [
      { ...pat('plain'), id: 'tok_0123456789abcdefghij', subject: 'user-1', last4: 'wxyz' },
      { ...pat('long'), subject: `s${'x'.repeat(60)}` }, // does not fit the text column
      { ...pat('wide'), subject: 'snow ☃ man', last4: 'ab☃d' }, // wider than Latin-1
      { ...pat('latin1'), subject: 'José Müller', last4: 'éÿ' },
      { ...pat('empty'), id: '', subject: 'e', last4: '' },
    ]
    const byHash = new Map(records.map((record) => [record.tokenHash, record]))
    const cache = createCachedLookups(
      { findPatByHash: async (hash) => byHash.get(hash), findTenant: async () => undefined },
      { clock, maxEntries: 2 },
    )
    // Two slots, five records, three rounds: every slot holds each kind of text in turn.
    for (let round = 0; round < 3; round++) {
      for (const record of records) {
        await cache.findPatByHash(record.tokenHash)
        assert.deepEqual(await cache.maybeSync.findPatByHash(record.tokenHash), {
          ...record,
          ...ABSENT,
        })
      }
    }
  })

  it('keeps the hash a buggy store returned, so the core can still refuse the record', async () => {
    const wrong = { ...pat('a'), tokenHash: hashOf('other') }
    const cache = createCachedLookups({
      findPatByHash: async () => wrong,
      findTenant: async () => undefined,
    })
    await cache.findPatByHash(hashOf('a'))
    assert.equal((await cache.findPatByHash(hashOf('a')))?.tokenHash, hashOf('other'))
  })

  it('reused entry slots never mix up tokens (evictions, invalidations, expiry)', async () => {
    const clock = testClock(T0)
    const names = Array.from({ length: 40 }, (_, i) => `t${i}`)
    const inner = countingLookups(names.map((n) => pat(n)))
    const cache = createCachedLookups(inner.lookups, { maxEntries: 7, ttlMs: 50, clock })
    let seed = 1
    const random = () => {
      seed = (seed * 48271) % 2147483647
      return seed / 2147483647
    }
    for (let step = 0; step < 2000; step++) {
      const name = names[Math.floor(random() * names.length)] as string
      const roll = random()
      if (roll < 0.1) cache.invalidatePat(hashOf(name))
      else if (roll < 0.15) clock.advance(20)
      else if (roll < 0.16) cache.resync()
      else assert.equal((await cache.findPatByHash(hashOf(name)))?.id, name)
      assert.ok(cache.stats().size <= 7)
    }
  })

  it('concurrent lookups of one key share a single store call', async () => {
    const gate = deferred<PatRecord | undefined>()
    let calls = 0
    const cache = createCachedLookups(
      {
        findPatByHash: () => {
          calls++
          return gate.promise
        },
        findTenant: async () => undefined,
      },
      { clock: testClock(T0) },
    )
    const lookups = Array.from({ length: 20 }, () => cache.findPatByHash(hashOf('a')))
    const other = cache.findPatByHash(hashOf('b'))
    assert.equal(calls, 2)
    gate.resolve(pat('a'))
    const results = await Promise.all(lookups)
    assert.ok(results.every((r) => r?.id === 'a'))
    await other
    assert.deepEqual(cache.stats(), { hits: 19, misses: 2, size: 2, stale: 0 })
  })

  it('a store error reaches every waiting caller and is not cached', async () => {
    let fail = true
    let calls = 0
    const gate = deferred<void>()
    const cache = createCachedLookups(
      {
        async findPatByHash() {
          calls++
          await gate.promise
          if (fail) throw new Error('database is locked')
          return pat('a')
        },
        async findTenant() {
          throw new Error('store down')
        },
      },
      { clock: testClock(T0) },
    )
    const first = cache.findPatByHash(hashOf('a'))
    const second = cache.findPatByHash(hashOf('a'))
    gate.resolve()
    await assert.rejects(first, /database is locked/)
    await assert.rejects(second, /database is locked/)
    fail = false
    assert.equal((await cache.findPatByHash(hashOf('a')))?.id, 'a')
    assert.equal(calls, 2)
    await assert.rejects(cache.findTenant('acme'), /store down/)
    await assert.rejects(cache.findTenant('acme'), /store down/)
    assert.equal(cache.stats().size, 1)
  })

  it('invalidatePat makes the next lookup read the store', async () => {
    const clock = testClock(T0)
    const inner = countingLookups([pat('a')])
    const cache = createCachedLookups(inner.lookups, { clock })
    assert.equal((await cache.findPatByHash(hashOf('a')))?.revokedAt, null)
    inner.pats.set(hashOf('a'), pat('a', T0 + 1))
    assert.equal((await cache.findPatByHash(hashOf('a')))?.revokedAt, null, 'still cached')
    cache.invalidatePat(hashOf('a'))
    assert.equal((await cache.findPatByHash(hashOf('a')))?.revokedAt, T0 + 1)
  })

  it('a read in flight when the token is revoked is not cached, nor joined', async () => {
    const reads: ReturnType<typeof deferred<PatRecord | undefined>>[] = []
    const cache = createCachedLookups(
      {
        findPatByHash: () => {
          const read = deferred<PatRecord | undefined>()
          reads.push(read)
          return read.promise
        },
        findTenant: async () => undefined,
      },
      { clock: testClock(T0) },
    )
    const stale = cache.findPatByHash(hashOf('a'))
    cache.invalidatePat(hashOf('a')) // the revocation commits while the read is in flight
    const fresh = cache.findPatByHash(hashOf('a'))
    assert.equal(reads.length, 2, 'the second caller does not join the stale read')
    // The slow, stale read finishes last: it must not overwrite the fresh entry.
    reads[1]?.resolve(pat('a', T0 + 1))
    assert.equal((await fresh)?.revokedAt, T0 + 1)
    reads[0]?.resolve(pat('a'))
    assert.equal((await stale)?.revokedAt, null)
    assert.equal((await cache.findPatByHash(hashOf('a')))?.revokedAt, T0 + 1)
    assert.equal(reads.length, 2, 'the fresh result was cached, the stale one was not')
  })

  it('caches tenants, including unknown ones; invalidateTenant and clear forget them', async () => {
    const clock = testClock(T0)
    const inner = countingLookups([pat('a')], [acme])
    const cache = createCachedLookups(inner.lookups, { clock })
    assert.equal((await cache.findTenant('acme'))?.enabled, true)
    assert.equal(await cache.findTenant('nobody'), undefined)
    await cache.findTenant('acme')
    await cache.findTenant('nobody')
    assert.equal(inner.calls.tenants, 2)

    inner.tenants.set('acme', { ...acme, enabled: false })
    cache.invalidateTenant('acme')
    assert.equal((await cache.findTenant('acme'))?.enabled, false)
    assert.equal(inner.calls.tenants, 3)

    await cache.findPatByHash(hashOf('a'))
    assert.equal(cache.stats().size, 3)
    cache.clear()
    assert.equal(cache.stats().size, 0)
    await cache.findTenant('acme')
    await cache.findTenant('nobody')
    await cache.findPatByHash(hashOf('a'))
    assert.equal(inner.calls.tenants, 5)
    assert.equal(inner.calls.pats, 2)
  })

  it('ttlMs 0 disables caching but still shares concurrent lookups', async () => {
    const inner = countingLookups([pat('a')])
    const cache = createCachedLookups(inner.lookups, { ttlMs: 0, clock: testClock(T0) })
    await Promise.all([cache.findPatByHash(hashOf('a')), cache.findPatByHash(hashOf('a'))])
    await cache.findPatByHash(hashOf('a'))
    await cache.findPatByHash(hashOf('zz'))
    await cache.findPatByHash(hashOf('zz'))
    assert.equal(inner.calls.pats, 4)
    assert.equal(cache.stats().size, 0)
  })

  it('rejects invalid options', () => {
    const { lookups } = countingLookups()
    assert.throws(() => createCachedLookups(lookups, { ttlMs: -1 }), RangeError)
    assert.throws(() => createCachedLookups(lookups, { maxEntries: 0 }), RangeError)
    assert.throws(() => createCachedLookups(lookups, { maxNegativeEntries: 1.5 }), RangeError)
    assert.throws(() => createCachedLookups(lookups, { negativeTtlMs: Number.NaN }), RangeError)
    assert.throws(() => createCachedLookups(lookups, { tenantStaleIfErrorMs: -1 }), RangeError)
  })

  it('store down: a tenant read before is served from its last-known state, up to the maximum staleness', async () => {
    const clock = testClock(T0)
    const inner = failingLookups([pat('a')], [acme])
    const cache = createCachedLookups(inner.lookups, {
      ttlMs: 2000,
      tenantStaleIfErrorMs: 60_000,
      clock,
    })
    assert.equal((await cache.findTenant('acme'))?.enabled, true)
    inner.down = true
    clock.advance(2000) // the fresh entry has expired: the store is asked, and throws
    assert.equal((await cache.findTenant('acme'))?.enabled, true)
    assert.equal(cache.stats().stale, 1)
    await assert.rejects(cache.findTenant('never-seen'), /store down/)
    clock.advance(58_000) // exactly the maximum staleness since the last successful read
    assert.equal((await cache.findTenant('acme'))?.enabled, true)
    clock.advance(1)
    await assert.rejects(cache.findTenant('acme'), /store down/)
    // Recovery: the store answers again and its answer wins over the last-known state.
    inner.down = false
    inner.tenants.set('acme', { ...acme, enabled: false })
    assert.equal((await cache.findTenant('acme'))?.enabled, false)
  })

  it('store down: a disabled tenant stays disabled (its last-known state is served as it was)', async () => {
    const clock = testClock(T0)
    const inner = failingLookups([], [{ ...acme, enabled: false }])
    const cache = createCachedLookups(inner.lookups, { clock })
    assert.equal((await cache.findTenant('acme'))?.enabled, false)
    inner.down = true
    cache.resync()
    assert.equal((await cache.findTenant('acme'))?.enabled, false)
  })

  it('store down: a PAT is never served stale, even one read a moment ago', async () => {
    const clock = testClock(T0)
    const inner = failingLookups([pat('a')], [acme])
    const cache = createCachedLookups(inner.lookups, { clock })
    assert.equal((await cache.findPatByHash(hashOf('a')))?.id, 'a')
    inner.down = true
    clock.advance(2000)
    await assert.rejects(cache.findPatByHash(hashOf('a')), /store down/)
    await cache.findTenant('acme').catch(() => {})
    assert.equal(cache.stats().stale, 0)
  })

  it('resync drops every PAT (found or not) and fresh tenant, and keeps only the last-known tenants', async () => {
    const clock = testClock(T0)
    const inner = failingLookups([pat('a')], [acme])
    const cache = createCachedLookups(inner.lookups, { ttlMs: 60_000, clock })
    await cache.findPatByHash(hashOf('a'))
    await cache.findPatByHash(hashOf('unknown'))
    await cache.findTenant('acme')
    assert.equal(cache.stats().size, 3)
    inner.pats.set(hashOf('a'), pat('a', T0 + 1)) // revoked; its notification was lost
    inner.pats.set(hashOf('unknown'), pat('unknown'))
    cache.resync()
    assert.equal(cache.stats().size, 0)
    assert.equal((await cache.findPatByHash(hashOf('a')))?.revokedAt, T0 + 1)
    assert.equal((await cache.findPatByHash(hashOf('unknown')))?.id, 'unknown')
    assert.equal(inner.calls.pats, 4)
    inner.down = true
    cache.resync()
    await assert.rejects(cache.findPatByHash(hashOf('a')), /store down/)
    assert.equal((await cache.findTenant('acme'))?.id, 'acme', 'last-known tenant survives')
    cache.clear()
    await assert.rejects(cache.findTenant('acme'), /store down/, 'clear() forgets it too')
  })

  it('a tenant_changed notification drops the last-known state: that tenant fails closed while the store is down', async () => {
    const clock = testClock(T0)
    const inner = failingLookups([], [acme])
    const cache = createCachedLookups(inner.lookups, { clock })
    await cache.findTenant('acme')
    inner.down = true
    cache.invalidateTenant('acme')
    await assert.rejects(cache.findTenant('acme'), /store down/)
  })

  it('a tenant read as not found forgets its last-known state', async () => {
    const clock = testClock(T0)
    const inner = failingLookups([], [acme])
    const cache = createCachedLookups(inner.lookups, { clock })
    await cache.findTenant('acme')
    inner.tenants.delete('acme')
    cache.resync()
    assert.equal(await cache.findTenant('acme'), undefined)
    inner.down = true
    cache.resync()
    await assert.rejects(cache.findTenant('acme'), /store down/)
  })

  it('during an outage the store is asked once per TTL per tenant, not once per request', async () => {
    const clock = testClock(T0)
    const inner = failingLookups([], [acme])
    const cache = createCachedLookups(inner.lookups, {
      ttlMs: 2000,
      tenantStaleIfErrorMs: 5000,
      clock,
    })
    await cache.findTenant('acme')
    inner.down = true
    cache.resync()
    for (let i = 0; i < 10; i++) assert.equal((await cache.findTenant('acme'))?.id, 'acme')
    assert.equal(inner.calls.tenants, 2)
    clock.advance(2000)
    await cache.findTenant('acme')
    assert.equal(inner.calls.tenants, 3)
    // The re-served entry never outlives the maximum staleness (read at T0, + 5000).
    clock.advance(2000)
    await cache.findTenant('acme')
    assert.equal(inner.calls.tenants, 4)
    clock.advance(999)
    await cache.findTenant('acme')
    assert.equal(inner.calls.tenants, 4, 'served until T0 + 5000, not T0 + 6000')
    clock.advance(2)
    await assert.rejects(cache.findTenant('acme'), /store down/)
    assert.equal(inner.calls.tenants, 5)
  })

  it('tenantStaleIfErrorMs 0 disables stale-if-error', async () => {
    const inner = failingLookups([], [acme])
    const cache = createCachedLookups(inner.lookups, {
      tenantStaleIfErrorMs: 0,
      clock: testClock(T0),
    })
    await cache.findTenant('acme')
    inner.down = true
    cache.resync()
    await assert.rejects(cache.findTenant('acme'), /store down/)
  })

  it('a CLI revoke in another process is seen once the TTL has passed (real SQLite)', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'tokengate-cache-'))
    t.after(() => rmSync(dir, { recursive: true, force: true }))
    const path = join(dir, 'tokengate.db')
    const server = openSqliteStore(path)
    const cli = openSqliteStore(path)
    t.after(() => server.close())
    t.after(() => cli.close())
    await server.migrate()
    await cli.createTenant({ id: 'acme', name: 'Acme' }, T0)
    await cli.insertPat(pat('a'))

    const clock = testClock(T0)
    const cache = createCachedLookups(server, { ttlMs: 2000, clock })
    server.watch((c) => c.kind === 'pat_changed' && cache.invalidatePat(c.tokenHash))
    assert.equal((await cache.findPatByHash(hashOf('a')))?.revokedAt, null)

    await cli.revokePat('a', T0 + 5) // no notification reaches the server's store object
    clock.advance(1999)
    assert.equal((await cache.findPatByHash(hashOf('a')))?.revokedAt, null)
    clock.advance(1)
    assert.equal((await cache.findPatByHash(hashOf('a')))?.revokedAt, T0 + 5)

    // A revoke through the server's own store object is seen at once.
    await cli.insertPat(pat('b'))
    assert.equal((await cache.findPatByHash(hashOf('b')))?.revokedAt, null)
    await server.revokePat('b', T0 + 6)
    assert.equal((await cache.findPatByHash(hashOf('b')))?.revokedAt, T0 + 6)
  })
})
