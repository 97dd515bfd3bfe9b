import assert from 'node:assert/strict'
import { test } from 'node:test'
import { withOverrides } from '../../src/stores/store-overrides.ts'

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
