import assert from 'node:assert/strict'
import { test } from 'node:test'
import { propertyReader, withOverrides } from '../../src/stores/store-overrides.ts'

function counterStore() {
  let reads = 0
  return {
    count: 0,
    get reads() {
      return reads
    },
    read(this: { count: number }) {
      reads++
      return this.count
    },
    write(n: number) {
      return `stored ${n}`
    },
  }
}

test('an override answers in place of the store’s method; the others are the store’s', () => {
  const store = counterStore()
  const wrapped = withOverrides(store, { write: (n: number) => `sent ${n}` })
  assert.equal(wrapped.write(1), 'sent 1')
  assert.equal(store.write(1), 'stored 1')
  store.count = 7
  assert.equal(wrapped.read(), 7)
})

test('getters and fields are read at each access, not copied', () => {
  const store = counterStore()
  const wrapped = withOverrides(store, {})
  assert.equal(wrapped.reads, 0)
  store.read()
  store.read()
  assert.equal(wrapped.reads, 2)
  store.count = 3
  assert.equal(wrapped.count, 3)
})

test('a method taken off the wrapper still runs on the store, and is bound once', () => {
  const store = counterStore()
  store.count = 5
  const wrapped = withOverrides(store, {})
  const read = wrapped.read as () => number
  assert.equal(read(), 5)
  assert.equal(wrapped.read, read, 'the same bound function at every access')
})

test('a method the store replaces later is the one called', () => {
  const store = counterStore()
  const wrapped = withOverrides(store, {})
  assert.equal(wrapped.write(2), 'stored 2')
  store.write = (n: number) => `replaced ${n}`
  assert.equal(wrapped.write(2), 'replaced 2')
})

test('layers stack: the outer override wins, the inner one still applies beneath it', () => {
  const store = counterStore()
  const inner = withOverrides(store, { write: (n: number) => `inner ${n}` })
  const outer = withOverrides(inner, { read: () => -1 })
  assert.equal(outer.read(), -1)
  assert.equal(outer.write(4), 'inner 4')
})

test('a property reader reads what an access through the layers reads, live, at each call', () => {
  const store = counterStore()
  const outer = withOverrides(withOverrides(store, { write: () => 'inner' }), {})
  const reads = propertyReader(outer, 'reads')
  const count = propertyReader(outer, 'count')
  assert.equal(reads(), 0)
  store.read()
  store.read()
  assert.equal(reads(), 2, 'a getter is run at each call')
  assert.equal(reads(), outer.reads)
  store.count = 9
  assert.equal(count(), 9, 'a field is read at each call')
  assert.equal(count(), outer.count)
})

test('a property reader reads an overriding layer’s value, the outermost first', () => {
  const store = counterStore()
  const inner = withOverrides(store, { count: 1 })
  const outer = withOverrides(inner, { count: 2 })
  store.count = 5
  assert.equal(propertyReader(inner, 'count')(), inner.count)
  assert.equal(propertyReader(inner, 'count')(), 1)
  assert.equal(propertyReader(outer, 'count')(), outer.count)
  assert.equal(propertyReader(outer, 'count')(), 2)
  assert.equal(propertyReader(store, 'count')(), 5, 'an object that is no wrapper is read as it is')
})

test('a property reader runs a getter on the store itself, as the wrapper does', () => {
  class Follower {
    #asOf: number | undefined = 10
    get changesReadAsOf(): number | undefined {
      return this.#asOf
    }
    advance(): void {
      this.#asOf = (this.#asOf ?? 0) + 1
    }
  }
  const store = new Follower()
  const wrapped = withOverrides(withOverrides(store, {}), {})
  const read = propertyReader(wrapped, 'changesReadAsOf')
  assert.equal(read(), 10, 'a private field read through `this` needs the store as receiver')
  store.advance()
  assert.equal(read(), 11)
  assert.equal(read(), wrapped.changesReadAsOf)
})
