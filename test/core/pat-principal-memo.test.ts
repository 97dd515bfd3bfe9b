/**
 * The PAT principal memo (issue #36, `lib/bounded-memo.ts` in `authenticators/pat.ts`): one
 * frozen principal per stored record object, never a stale one for a record edited in place.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { PatRecord } from '../../src/core/ports.ts'
import type { AuthResult, Principal } from '../../src/core/principal.ts'
import { addPat, bearer, harness } from '../helpers/core-fakes.ts'

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

  test('the same stored record twice: one frozen allowed result, no object per request', async () => {
    const h = harness()
    const { token } = addPat(h.lookups)
    const first = await h.authenticate({ authorization: bearer(token), tenantIds: [] })
    const second = await h.authenticate({ authorization: bearer(token), tenantIds: [] })
    assert.equal(first.ok, true)
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
