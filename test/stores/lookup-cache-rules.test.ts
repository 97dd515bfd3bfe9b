import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import {
  type CacheSlots,
  LastKnown,
  LookupCache,
  type LookupCacheSettings,
} from '../../src/stores/lookup-cache-rules.ts'
import { testClock } from '../helpers/clock.ts'

const T0 = Date.UTC(2026, 0, 1)

/**
 * The most trivial storage: an unbounded Map that records what the rules ask of it. The
 * rules must work over it unchanged, which is what keeps them apart from the packed layout.
 */
class PlainMapSlots<V> implements CacheSlots<V> {
  readonly entries = new Map<string, { value: V; expiresAt: number }>()
  readonly calls: string[] = []

  get size(): number {
    return this.entries.size
  }

  get(key: string, now: number): V | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt > now) return entry.value
    this.entries.delete(key)
    return undefined
  }

  set(key: string, value: V, expiresAt: number): void {
    this.calls.push(`set ${key}`)
    this.entries.set(key, { value, expiresAt })
  }

  delete(key: string): void {
    this.calls.push(`delete ${key}`)
    this.entries.delete(key)
  }

  clear(): void {
    this.calls.push('clear')
    this.entries.clear()
  }
}

/** A store of `key -> value`, counting loads; `fail` makes every load throw. */
function backing(initial: Record<string, string> = {}) {
  const rows = new Map(Object.entries(initial))
  const state = { loads: 0, fail: false as boolean | Error }
  const load = async (key: string): Promise<string | undefined> => {
    state.loads++
    if (state.fail !== false) throw state.fail === true ? new Error('store down') : state.fail
    return rows.get(key)
  }
  return { rows, state, load }
}

function setup(
  options: {
    rows?: Record<string, string>
    ttlMs?: number
    negativeTtlMs?: number
    maxNegativeEntries?: number
    staleIfErrorMs?: number
    load?: (key: string) => Promise<string | undefined>
  } = {},
) {
  const clock = testClock(T0)
  const store = backing(options.rows ?? {})
  const settings: LookupCacheSettings = {
    ttlMs: options.ttlMs ?? 2000,
    negativeTtlMs: options.negativeTtlMs ?? 500,
    maxNegativeEntries: options.maxNegativeEntries ?? 100,
    clock,
  }
  const counters = { hits: 0, misses: 0, stale: 0 }
  const slots = new PlainMapSlots<string>()
  const lastKnown =
    options.staleIfErrorMs === undefined
      ? undefined
      : new LastKnown<string>(options.staleIfErrorMs, 100)
  const cache = new LookupCache<string>(
    settings,
    counters,
    options.load ?? store.load,
    slots,
    lastKnown,
  )
  return { clock, store, counters, slots, cache }
}

describe('lookup cache rules over a Map-backed CacheSlots', () => {
  it('serves a found value from the slots until its TTL passes, then asks the store again', async () => {
    const { clock, store, counters, slots, cache } = setup({ rows: { a: 'A' } })
    assert.equal(await cache.get('a'), 'A')
    assert.deepEqual(slots.calls, ['set a'])
    assert.equal(slots.entries.get('a')?.expiresAt, T0 + 2000)
    clock.advance(1999)
    // A hit is the value itself, not a promise.
    assert.equal(cache.get('a'), 'A')
    assert.equal(store.state.loads, 1)
    clock.advance(1)
    store.rows.set('a', 'A2')
    assert.equal(await cache.get('a'), 'A2')
    assert.equal(store.state.loads, 2)
    assert.deepEqual({ hits: counters.hits, misses: counters.misses }, { hits: 1, misses: 2 })
  })

  it('ttlMs 0 stores nothing found: every lookup asks the store', async () => {
    const { store, slots, cache } = setup({ rows: { a: 'A' }, ttlMs: 0 })
    assert.equal(await cache.get('a'), 'A')
    assert.equal(await cache.get('a'), 'A')
    assert.equal(store.state.loads, 2)
    assert.equal(slots.size, 0)
  })

  it('remembers "not found" for negativeTtlMs, apart from the slots and bounded on its own', async () => {
    const { clock, store, slots, cache } = setup({
      rows: { a: 'A' },
      negativeTtlMs: 500,
      maxNegativeEntries: 3,
    })
    assert.equal(await cache.get('a'), 'A')
    assert.equal(await cache.get('nope'), undefined)
    assert.equal(cache.get('nope'), undefined)
    assert.equal(store.state.loads, 2)
    // A flood of unknown keys is kept in the negative entries: the slots hold only 'a'.
    for (let i = 0; i < 50; i++) await cache.get(`unknown-${i}`)
    assert.deepEqual([...slots.entries.keys()], ['a'])
    assert.equal(cache.size, 1 + 3)
    assert.equal(cache.get('a'), 'A')
    // 'nope' was evicted from the bounded negative entries: asked again.
    const loads = store.state.loads
    assert.equal(await cache.get('nope'), undefined)
    assert.equal(store.state.loads, loads + 1)
    clock.advance(500)
    assert.equal(await cache.get('nope'), undefined)
    assert.equal(store.state.loads, loads + 2)
  })

  it('negativeTtlMs 0 remembers no "not found"', async () => {
    const { store, cache } = setup({ negativeTtlMs: 0 })
    await cache.get('nope')
    await cache.get('nope')
    assert.equal(store.state.loads, 2)
    assert.equal(cache.size, 0)
  })

  it('concurrent misses join one store call; its error reaches each of them and is not cached', async () => {
    let release: (value: string | undefined) => void = () => {}
    let calls = 0
    const { counters, cache } = setup({
      load: () => {
        calls++
        return new Promise((resolve) => {
          release = resolve
        })
      },
    })
    const first = cache.get('a')
    const second = cache.get('a')
    assert.equal(first, second)
    assert.equal(calls, 1)
    release('A')
    assert.deepEqual(await Promise.all([first, second]), ['A', 'A'])
    assert.deepEqual({ hits: counters.hits, misses: counters.misses }, { hits: 1, misses: 1 })

    const failing = setup({ rows: { b: 'B' } })
    failing.store.state.fail = true
    const results = await Promise.allSettled([failing.cache.get('b'), failing.cache.get('b')])
    assert.deepEqual(
      results.map((r) => r.status),
      ['rejected', 'rejected'],
    )
    assert.equal(failing.store.state.loads, 1)
    failing.store.state.fail = false
    assert.equal(await failing.cache.get('b'), 'B')
    assert.equal(failing.store.state.loads, 2)
  })

  it('invalidate forgets the key, and a read started before it is neither cached nor joined', async () => {
    const pending: ((value: string | undefined) => void)[] = []
    const { slots, cache } = setup({
      load: () =>
        new Promise((resolve) => {
          pending.push(resolve)
        }),
    })
    const before = cache.get('a')
    cache.invalidate('a')
    const after = cache.get('a')
    assert.notEqual(after, before)
    assert.equal(pending.length, 2)
    ;(pending[0] as (value: string) => void)('old')
    assert.equal(await before, 'old')
    assert.equal(slots.size, 0)
    ;(pending[1] as (value: string) => void)('new')
    assert.equal(await after, 'new')
    assert.equal(cache.get('a'), 'new')
    cache.invalidate('a')
    assert.equal(slots.calls.at(-1), 'delete a')
    assert.equal(slots.size, 0)
  })

  it('stale-if-error: serves the last read while the store throws, within its bound, never past it', async () => {
    const { clock, store, counters, cache } = setup({
      rows: { t: 'T' },
      ttlMs: 2000,
      staleIfErrorMs: 10_000,
    })
    assert.equal(await cache.get('t'), 'T')
    store.state.fail = true
    clock.advance(2000)
    assert.equal(await cache.get('t'), 'T')
    assert.equal(counters.stale, 1)
    // Served as found for one TTL: one failing store call per TTL, not one per request.
    assert.equal(cache.get('t'), 'T')
    assert.equal(store.state.loads, 2)
    clock.advance(7999)
    assert.equal(await cache.get('t'), 'T')
    assert.equal(cache.get('t'), 'T')
    assert.equal(counters.stale, 2)
    // The last read (T0) is usable until T0 + 10 s inclusive; the found entry made from it
    // at T0 + 9999 is held until then, not for a full TTL (T0 + 11999).
    clock.advance(1)
    assert.equal(await cache.get('t'), 'T')
    assert.equal(counters.stale, 3)
    clock.advance(1)
    await assert.rejects(Promise.resolve(cache.get('t')), /store down/)
    assert.equal(counters.stale, 3)
  })

  it('without a LastKnown (PATs) a failing store fails every lookup: nothing is served stale', async () => {
    const { clock, store, cache } = setup({ rows: { p: 'P' } })
    assert.equal(await cache.get('p'), 'P')
    store.state.fail = true
    clock.advance(2000)
    await assert.rejects(Promise.resolve(cache.get('p')), /store down/)
  })

  it('invalidate drops the last-known value too: that key fails closed while the store is down', async () => {
    const { store, cache } = setup({ rows: { t: 'T' }, staleIfErrorMs: 10_000 })
    assert.equal(await cache.get('t'), 'T')
    cache.invalidate('t')
    store.state.fail = true
    await assert.rejects(Promise.resolve(cache.get('t')), /store down/)
  })

  it('a "not found" read forgets the last-known value', async () => {
    const { clock, store, cache } = setup({ rows: { t: 'T' }, staleIfErrorMs: 10_000 })
    assert.equal(await cache.get('t'), 'T')
    store.rows.delete('t')
    clock.advance(2000)
    assert.equal(await cache.get('t'), undefined)
    clock.advance(500)
    store.state.fail = true
    await assert.rejects(Promise.resolve(cache.get('t')), /store down/)
  })

  it('resync (clearFresh) clears the slots, negative entries and joins, and keeps only the last-known values; clear drops those too', async () => {
    const { store, slots, cache } = setup({ rows: { t: 'T' }, staleIfErrorMs: 10_000 })
    assert.equal(await cache.get('t'), 'T')
    assert.equal(await cache.get('nope'), undefined)
    cache.clearFresh()
    assert.equal(slots.calls.at(-1), 'clear')
    assert.equal(cache.size, 0)
    assert.equal(await cache.get('nope'), undefined)
    assert.equal(store.state.loads, 3)
    store.state.fail = true
    assert.equal(await cache.get('t'), 'T')
    cache.clear()
    assert.equal(cache.size, 0)
    await assert.rejects(Promise.resolve(cache.get('t')), /store down/)
  })
})
