import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, it } from 'node:test'
import { credentialDigest, KnownCredentials } from '../../src/auth/limiter.ts'

const digest = (token: string) => createHash('sha256').update(token).digest('hex')
const HOUR = 3_600_000

describe('KnownCredentials', () => {
  it('knows a remembered digest until the maximum age, then forgets it', () => {
    const known = new KnownCredentials(10, HOUR)
    known.remember(digest('a'), 0)
    assert.equal(known.has(digest('a'), HOUR), true)
    assert.equal(known.has(digest('b'), HOUR), false)
    assert.equal(known.has(digest('a'), HOUR + 1), false)
    assert.equal(known.has(digest('a'), 0), false, 'dropped once found too old')
  })

  it('forget() drops one digest; other digest forms (base64url) work alike', () => {
    const known = new KnownCredentials(10, HOUR)
    const basic = credentialDigest('Basic dXNlcjpwYXNz')
    known.remember(digest('a'), 0)
    known.remember(basic, 0)
    known.forget(digest('a'))
    known.forget(digest('never'))
    assert.equal(known.has(digest('a'), 1), false)
    assert.equal(known.has(basic, 1), true)
  })

  it('holds at most maxEntries, dropping the least recently refreshed first', () => {
    const known = new KnownCredentials(3, HOUR)
    const refresh = HOUR / 64
    known.remember(digest('a'), 0)
    known.remember(digest('b'), 1)
    known.remember(digest('c'), 2)
    known.remember(digest('a'), refresh - 1) // within the refresh interval: keeps its place
    known.remember(digest('d'), refresh) // drops a, the oldest refresh
    assert.equal(known.has(digest('a'), refresh), false)
    known.remember(digest('b'), refresh + 1) // refreshed: now the most recent
    known.remember(digest('e'), refresh + 2) // drops c
    assert.deepEqual(
      ['a', 'b', 'c', 'd', 'e'].map((name) => known.has(digest(name), refresh + 3)),
      [false, true, false, true, true],
    )
  })

  it('a refresh extends the age from the new time', () => {
    const known = new KnownCredentials(10, HOUR)
    known.remember(digest('a'), 0)
    known.remember(digest('a'), HOUR / 2)
    assert.equal(known.has(digest('a'), HOUR + HOUR / 4), true)
  })

  it('remember() after has() of the same digest refreshes it, even when its slot was reused between', () => {
    // has(a) notes a's slot for the remember(a) that follows; b evicting a (maxEntries 1)
    // and taking that slot meanwhile must not make remember(a) refresh b.
    const known = new KnownCredentials(1, HOUR)
    known.remember(digest('a'), 0)
    assert.equal(known.has(digest('a'), 1), true)
    known.remember(digest('b'), 2)
    known.remember(digest('a'), 3)
    assert.equal(known.has(digest('a'), 4), true)
    assert.equal(known.has(digest('b'), 4), false)
    // A refresh through the noted slot: a stays known past its first age limit.
    const refreshed = new KnownCredentials(10, HOUR)
    refreshed.remember(digest('a'), 0)
    assert.equal(refreshed.has(digest('a'), HOUR / 2), true)
    refreshed.remember(digest('a'), HOUR / 2)
    assert.equal(refreshed.has(digest('a'), HOUR + HOUR / 4), true)
    // forget() after has(): the noted slot is not used again.
    refreshed.forget(digest('a'))
    refreshed.remember(digest('c'), HOUR)
    refreshed.remember(digest('a'), HOUR)
    assert.equal(refreshed.has(digest('a'), HOUR), true)
    assert.equal(refreshed.has(digest('c'), HOUR), true)
  })
})
