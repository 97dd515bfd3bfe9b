import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, it } from 'node:test'
import { fitSlots, KeyedSlots } from '../../src/lib/keyed-slots.ts'

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

/** A deterministic pseudo-random sequence (Park–Miller), so a failure replays. */
function random(seed = 1) {
  let state = seed
  return () => {
    state = (state * 48271) % 2147483647
    return state / 2147483647
  }
}

/** Keys from the stored index of `table`, oldest first, walking the recency list. */
function keysByRecency(table: KeyedSlots, model: Map<string, number>): string[] {
  const bySlot = new Map([...model].map(([key, slot]) => [slot, key]))
  const order: string[] = []
  // Evict-and-restore would change the table: read the order from the model's slots instead,
  // by repeatedly asking for the oldest and touching it to the newest end.
  for (let i = 0; i < model.size; i++) {
    const slot = table.oldest()
    order.push(bySlot.get(slot) as string)
    table.touch(slot)
  }
  return order
}

describe('KeyedSlots', () => {
  it('finds each key it holds under the slot it gave, and gives the key back from the slot', () => {
    const table = new KeyedSlots(100, 32)
    const keys = [
      sha256('a'), // packed hex
      'pat:tok_0123456789abcdefghij', // one byte per character
      '',
      'é-latin1-ÿ',
      sha256('b').toUpperCase(), // not lowercase hex and too long: side map
      'x'.repeat(33), // too long: side map
      'snow ☃', // wider than one byte: side map
      `${sha256('c').slice(0, 63)}g`, // 64 characters, not hex
    ]
    const slots = keys.map((key) => table.add(key))
    assert.equal(new Set(slots).size, keys.length)
    keys.forEach((key, i) => {
      assert.equal(table.find(key), slots[i], key)
      assert.equal(table.keyAt(slots[i] as number), key)
    })
    assert.equal(table.size, keys.length)
    assert.equal(table.find(sha256('d')), -1)
    assert.equal(table.find('pat:tok_0123456789abcdefghiJ'), -1)
    assert.equal(table.find(sha256('a').toUpperCase()), -1)
    assert.ok(table.capacity >= keys.length)
  })

  it('a table whose width is not a multiple of 4 packs no hex key, and still holds every key', () => {
    const table = new KeyedSlots(10, 10)
    const hex = sha256('a').slice(0, 20) // 2 × 10 hex characters: held aside, not packed
    const slots = [hex, 'short', sha256('b')].map((key) => table.add(key))
    assert.deepEqual(
      [hex, 'short', sha256('b')].map((key) => table.find(key)),
      slots,
    )
    assert.equal(table.keyAt(slots[0] as number), hex)
    assert.equal(table.find(sha256('a').slice(0, 19)), -1)
  })

  it('a full table refuses a new key until one is deleted, and then reuses that slot', () => {
    const table = new KeyedSlots(3, 32)
    const slots = ['a', 'b', 'c'].map((key) => table.add(key))
    assert.throws(() => table.add('d'), /full/)
    table.delete(slots[1] as number)
    assert.equal(table.find('b'), -1)
    assert.equal(table.add('d'), slots[1])
    assert.equal(table.capacity, 3, 'never grows past maxEntries')
    assert.deepEqual(
      ['a', 'c', 'd'].map((key) => table.find(key)),
      [slots[0], slots[2], slots[1]],
    )
  })

  it('oldest() follows additions and touches; deleting the oldest moves it on', () => {
    const table = new KeyedSlots(10, 8)
    assert.equal(table.oldest(), -1)
    const a = table.add('a')
    const b = table.add('b')
    const c = table.add('c')
    assert.equal(table.oldest(), a)
    table.touch(a)
    assert.equal(table.oldest(), b)
    table.touch(a) // already the newest
    table.delete(b)
    assert.equal(table.oldest(), c)
    table.delete(c)
    assert.equal(table.oldest(), a)
    table.delete(a)
    assert.equal(table.oldest(), -1)
    assert.equal(table.size, 0)
  })

  it('agrees with a Map and an exact LRU list through colliding adds, deletes and touches', () => {
    // A small bound keeps the index small (8–32 positions), so probe chains collide and
    // DELETED marks pile up; the hex, inline and side forms are mixed.
    for (const seed of [1, 2, 3, 4, 5]) {
      const next = random(seed)
      const table = new KeyedSlots(12, 16)
      const model = new Map<string, number>()
      const recency: string[] = []
      const pool = Array.from({ length: 40 }, (_, i) =>
        i % 3 === 0
          ? sha256(`k${i}`).slice(0, 32)
          : i % 3 === 1
            ? `key-${i}`
            : `long-key-${i}-${'z'.repeat(20)}`,
      )
      for (let step = 0; step < 5000; step++) {
        const key = pool[Math.floor(next() * pool.length)] as string
        const slot = table.find(key)
        assert.equal(slot, model.get(key) ?? -1, `seed ${seed} step ${step}: find ${key}`)
        const roll = next()
        if (slot === -1) {
          if (model.size === 12) {
            const evicted = recency.shift() as string
            assert.equal(table.oldest(), model.get(evicted))
            table.delete(model.get(evicted) as number)
            model.delete(evicted)
          }
          const added = table.add(key)
          assert.ok(added >= 0 && added < table.capacity)
          assert.ok(![...model.values()].includes(added), 'a slot is never given twice')
          model.set(key, added)
          recency.push(key)
        } else if (roll < 0.4) {
          table.delete(slot)
          model.delete(key)
          recency.splice(recency.indexOf(key), 1)
        } else {
          table.touch(slot)
          recency.splice(recency.indexOf(key), 1)
          recency.push(key)
        }
        assert.equal(table.size, model.size)
      }
      for (const [key, slot] of model) assert.equal(table.keyAt(slot), key)
      assert.deepEqual(keysByRecency(table, model), recency)
    }
  })

  it('many deletions never leave a lookup probing forever, and growth keeps every key', () => {
    const table = new KeyedSlots(8, 32)
    for (let i = 0; i < 20_000; i++) {
      const slot = table.add(sha256(`churn-${i}`))
      assert.equal(table.find(sha256(`absent-${i}`)), -1)
      table.delete(slot)
    }
    assert.equal(table.size, 0)
    const big = new KeyedSlots(5000, 32)
    for (let i = 0; i < 5000; i++) big.add(sha256(`grow-${i}`))
    for (let i = 0; i < 5000; i += 7) assert.notEqual(big.find(sha256(`grow-${i}`)), -1)
    assert.equal(big.capacity, 5000)
  })

  it('clear() forgets every key and starts small again', () => {
    const table = new KeyedSlots(1000, 32)
    for (let i = 0; i < 500; i++) table.add(`k${i}`)
    table.add('x'.repeat(40))
    table.clear()
    assert.equal(table.size, 0)
    assert.equal(table.capacity, 0)
    assert.equal(table.find('k1'), -1)
    assert.equal(table.find('x'.repeat(40)), -1)
    assert.equal(table.oldest(), -1)
    assert.equal(table.keyAt(table.add('k1')), 'k1')
  })

  it('fitSlots grows a per-slot array to the capacity, keeping its values, and only then', () => {
    const table = new KeyedSlots(1000, 8)
    let values = new Float64Array(0)
    for (let i = 0; i < 200; i++) {
      const slot = table.add(`k${i}`)
      values = fitSlots(values, table)
      values[slot] = i + 0.5
    }
    assert.equal(values.length, table.capacity)
    assert.equal(fitSlots(values, table), values, 'no copy while it fits')
    for (let i = 0; i < 200; i++) assert.equal(values[table.find(`k${i}`)], i + 0.5)
  })

  it('a key asked for again after its slot was deleted or reused is not found there', () => {
    // The last key found is remembered with its slot: a delete must forget it, also when the
    // slot is handed to another key at once (free list), and clear() must forget it.
    for (const [keyBytes, key, other] of [
      [32, sha256('again-1'), sha256('again-2')],
      [16, 'inline-key', 'other-key'],
      [8, 'a-side-key-longer-than-8', 'another-side-key'],
    ] as const) {
      const table = new KeyedSlots(4, keyBytes)
      const slot = table.add(key)
      assert.equal(table.find(key), slot)
      assert.equal(table.find(key), slot)
      table.delete(slot)
      assert.equal(table.find(key), -1, `${keyBytes}: deleted`)
      const reused = table.add(other)
      assert.equal(reused, slot, 'the freed slot is reused')
      assert.equal(table.find(key), -1, `${keyBytes}: slot reused by another key`)
      assert.equal(table.find(other), reused)
      const again = table.add(key)
      assert.equal(table.find(key), again)
      table.clear()
      assert.equal(table.find(key), -1, `${keyBytes}: cleared`)
      assert.equal(table.find(other), -1)
      // A key just found missing, then added (the table growing meanwhile), is found.
      for (let i = 0; i < 3; i++) table.add(`filler-${i}`)
      assert.equal(table.find(key), -1)
      assert.equal(table.find(key), -1, `${keyBytes}: still missing`)
      const added = table.add(key)
      assert.equal(table.find(key), added, `${keyBytes}: added after a miss`)
    }
  })

  it('tables of different widths and seeds looking up the same keys in turn each answer for themselves', () => {
    // One parse of a hex key is shared by every table (each hashes it with its own seed):
    // interleaved lookups of equal and of differently shaped keys must not mix them up.
    const next = random(7)
    const tables = [new KeyedSlots(50, 32), new KeyedSlots(50, 32), new KeyedSlots(50, 16)]
    const models = tables.map(() => new Map<string, number>())
    const pool = Array.from({ length: 60 }, (_, i) => {
      const digest = sha256(`shared-${i}`)
      if (i % 4 === 0) return digest.slice(0, 32)
      // Hex for 60 characters, then not: a parse that fails late must leave nothing behind.
      if (i % 4 === 1) return `${digest.slice(0, 60)}xyz${i % 10}`
      return digest
    })
    for (let step = 0; step < 20_000; step++) {
      const which = Math.floor(next() * tables.length)
      const table = tables[which] as KeyedSlots
      const model = models[which] as Map<string, number>
      const key = pool[Math.floor(next() * pool.length)] as string
      const slot = table.find(key)
      assert.equal(slot, model.get(key) ?? -1, `step ${step}: table ${which} find ${key}`)
      if (slot === -1) {
        if (model.size === 50) {
          const oldest = table.oldest()
          const evicted = [...model].find(([, s]) => s === oldest)?.[0] as string
          table.delete(oldest)
          model.delete(evicted)
        }
        model.set(key, table.add(key))
      } else if (next() < 0.3) {
        table.delete(slot)
        model.delete(key)
      } else {
        table.touch(slot)
      }
    }
    tables.forEach((table, i) => {
      for (const [key, slot] of models[i] as Map<string, number>) {
        assert.equal(table.keyAt(slot), key)
        assert.equal(table.find(key), slot)
      }
    })
  })

  it('rejects invalid bounds', () => {
    assert.throws(() => new KeyedSlots(0, 32), RangeError)
    assert.throws(() => new KeyedSlots(10, 0), RangeError)
    assert.throws(() => new KeyedSlots(10, 251), RangeError)
  })
})
