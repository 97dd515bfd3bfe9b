/**
 * The bounded, direct-mapped memo behind the lookup cache's record per slot and the PAT
 * principal per record (issue #36): a hit only for the very key put at the place, a place
 * taken by another key or forgotten answers nothing, and the bound is the places.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, test } from 'node:test'
import { BoundedMemo, digestPlace } from '../../src/lib/bounded-memo.ts'

describe('BoundedMemo', () => {
  test('hands back the value of the same key object, never of an equal copy', () => {
    const memo = new BoundedMemo<object, string>(8)
    const record = { key: 'abc123' }
    assert.equal(memo.get(record, 3), undefined)
    memo.set(record, 3, 'built')
    assert.equal(memo.get(record, 3), 'built')
    assert.equal(memo.get({ ...record }, 3), undefined)
  })

  test('places wrap at the size: a key put at place p is found at p + size', () => {
    const memo = new BoundedMemo<number, string>(4)
    memo.set(6, 6, 'six')
    assert.equal(memo.get(6, 6 + 4), 'six')
    assert.equal(memo.get(6, 6 + 1), undefined)
  })

  test('bounded: a key landing on a taken place replaces the one there', () => {
    const memo = new BoundedMemo<number, string>(4)
    memo.set(1, 1, 'one')
    memo.set(5, 5, 'five')
    assert.equal(memo.get(1, 1), undefined)
    assert.equal(memo.get(5, 5), 'five')
    // Every other place is still free for its own keys.
    memo.set(2, 2, 'two')
    assert.equal(memo.get(5, 5), 'five')
    assert.equal(memo.get(2, 2), 'two')
  })

  test('forget drops the key’s value, and only while the key still holds the place', () => {
    const memo = new BoundedMemo<number, string>(4)
    memo.set(1, 1, 'one')
    memo.forget(1, 1)
    assert.equal(memo.get(1, 1), undefined)
    memo.set(5, 5, 'five')
    memo.forget(1, 1)
    assert.equal(memo.get(5, 5), 'five', 'another key’s forget leaves it')
  })

  test('clear empties every place', () => {
    const memo = new BoundedMemo<number, string>(4)
    for (let key = 0; key < 4; key++) memo.set(key, key, String(key))
    memo.clear()
    for (let key = 0; key < 4; key++) assert.equal(memo.get(key, key), undefined)
  })

  test('size must be a power of two', () => {
    assert.throws(() => new BoundedMemo(1000), RangeError)
    assert.throws(() => new BoundedMemo(0), RangeError)
    assert.throws(() => new BoundedMemo(2.5), RangeError)
  })
})

describe('digestPlace', () => {
  test('spreads digests over the places; a key shorter than three characters still has one', () => {
    const memo = new BoundedMemo<string, string>(1024)
    const places = new Set<number>()
    for (let i = 0; i < 64; i++) {
      const digest = createHash('sha256').update(`key ${i}`).digest('hex')
      places.add(digestPlace(digest) & 1023)
    }
    assert.ok(places.size > 32, `${places.size} places for 64 digests`)
    for (const short of ['', 'a', 'ab']) {
      assert.equal(typeof digestPlace(short), 'number')
      assert.ok(Number.isInteger(digestPlace(short)))
      memo.set(short, digestPlace(short), short)
      assert.equal(memo.get(short, digestPlace(short)), short)
    }
  })
})
