import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { PatRecord } from '../../src/core/ports.ts'
import type { AuthResult, Principal } from '../../src/core/principal.ts'
import { createRecordMemo } from '../../src/core/record-memo.ts'
import { addPat, bearer, harness } from '../helpers/core-fakes.ts'

interface Rec {
  readonly key: string
  n: number
}
const always = () => true

describe('createRecordMemo', () => {
  test('hands back the value of the same record object, never of an equal copy', () => {
    const memo = createRecordMemo<Rec, string>(8, (r) => r.key)
    const record = { key: 'abc123', n: 1 }
    assert.equal(memo.get(record, always), undefined)
    memo.set(record, 'built')
    assert.equal(memo.get(record, always), 'built')
    assert.equal(memo.get({ ...record }, always), undefined)
  })

  test('a value its record no longer matches is not handed back', () => {
    const memo = createRecordMemo<Rec, number>(8, (r) => r.key)
    const record = { key: 'abc123', n: 1 }
    memo.set(record, 1)
    record.n = 2
    assert.equal(
      memo.get(record, (value, r) => value === r.n),
      undefined,
    )
  })

  test('bounded: a record landing on a taken place replaces the one there', () => {
    const memo = createRecordMemo<Rec, string>(1, (r) => r.key)
    const a = { key: 'aaa', n: 0 }
    const b = { key: 'bbb', n: 0 }
    memo.set(a, 'a')
    memo.set(b, 'b')
    assert.equal(memo.get(a, always), undefined)
    assert.equal(memo.get(b, always), 'b')
  })

  test('keys shorter than three characters still have a place', () => {
    const memo = createRecordMemo<Rec, string>(4, (r) => r.key)
    const short = { key: '', n: 0 }
    memo.set(short, 'short')
    assert.equal(memo.get(short, always), 'short')
  })

  test('size must be a power of two', () => {
    assert.throws(() => createRecordMemo(1000, (r: Rec) => r.key), RangeError)
    assert.throws(() => createRecordMemo(0, (r: Rec) => r.key), RangeError)
  })
})

function principalOf(result: AuthResult): Principal {
  assert.equal(result.ok, true)
  if (!result.ok) throw new Error('unreachable')
  return result.principal
}

describe('PAT principal memo (issue #36)', () => {
  test('the same stored record twice: one frozen principal', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    const first = principalOf(await h.authenticate({ authorization: bearer(token), tenantIds: [] }))
    const second = principalOf(
      await h.authenticate({ authorization: bearer(token), tenantIds: [] }),
    )
    assert.equal(second, first)
    assert.ok(Object.isFrozen(first))
  })

  test('a record edited in place gets a principal of its new values', async () => {
    const h = harness()
    const { token, record } = addPat(h.lookups)
    const before = principalOf(
      await h.authenticate({ authorization: bearer(token), tenantIds: [] }),
    )
    const edits: Partial<Record<keyof PatRecord, unknown>>[] = [
      { permissions: ['tokens:write'] },
      { subject: 'other-bot' },
      { expiresAt: (record.expiresAt as number) + 1 },
      { rateLimit: { max: 5, windowSec: 60 } },
      { quota: { max: 10, windowSec: 3600 } },
    ]
    let last = before
    for (const edit of edits) {
      Object.assign(record as object, edit)
      const after = principalOf(
        await h.authenticate({ authorization: bearer(token), tenantIds: [] }),
      )
      assert.notEqual(after, last, `after ${Object.keys(edit)[0]}`)
      assert.deepEqual(after.permissions, record.permissions)
      assert.equal(after.subject, record.subject)
      assert.equal(after.expiresAt, record.expiresAt)
      assert.equal(after.limits?.rateLimit ?? null, record.rateLimit ?? null)
      assert.equal(after.limits?.quota ?? null, record.quota ?? null)
      last = after
    }
  })

  test('two keys never share a principal', async () => {
    const h = harness()
    const one = addPat(h.lookups)
    const two = addPat(h.lookups)
    const a = principalOf(await h.authenticate({ authorization: bearer(one.token), tenantIds: [] }))
    const b = principalOf(await h.authenticate({ authorization: bearer(two.token), tenantIds: [] }))
    assert.notEqual(a.tokenId, b.tokenId)
    assert.equal(a.tokenId, one.record.id)
    assert.equal(b.tokenId, two.record.id)
    assert.equal(a.fingerprint, `pat_…${one.token.slice(-4)}`)
    assert.equal(b.fingerprint, `pat_…${two.token.slice(-4)}`)
  })
})
