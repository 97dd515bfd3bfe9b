/**
 * The store contract of issue #34 (JWT revocation rules), run by `storeContract` for every
 * backend: one rule per (issuer, kind, value) widened on a second write, listing what is
 * still in force, removal, retention of expired rules, and a change for every write.
 */
import assert from 'node:assert/strict'
import { describe, it, type TestContext } from 'node:test'
import type { JwtRevocationRule } from '../../src/core/jwt-revocations.ts'
import type { Store, StoreChange } from '../../src/stores/store.ts'
import { type MakeStore, T0 } from './contract.ts'

const HOUR = 3_600_000
const ISS = 'https://idp.example/'

function rule(id: string, overrides: Partial<JwtRevocationRule> = {}): JwtRevocationRule {
  return {
    id,
    issuer: ISS,
    kind: 'sub',
    value: `user-${id}`,
    issuedBefore: T0,
    reason: 'left the company',
    createdAt: T0,
    createdBy: 'cli:ops',
    expiresAt: T0 + 24 * HOUR,
    ...overrides,
  }
}

export function jwtRevocationsContract(name: string, makeStore: MakeStore): void {
  async function open(t: TestContext): Promise<Store> {
    const { store, cleanup } = await makeStore()
    t.after(cleanup)
    await store.migrate()
    return store
  }

  describe(`${name} store contract: JWT revocation rules`, () => {
    it('stores, reads back, lists what is in force and removes rules', async (t) => {
      const store = await open(t)
      const jti = rule('r1', { kind: 'jti', value: 'token-1', issuedBefore: null, reason: null })
      const sub = rule('r2', { createdAt: T0 + 1 })
      assert.deepEqual(await store.putJwtRevocation(jti), jti)
      assert.deepEqual(await store.putJwtRevocation(sub), sub)
      assert.deepEqual(await store.getJwtRevocation('r2'), sub)
      assert.equal(await store.getJwtRevocation('nope'), undefined)
      assert.deepEqual(await store.listJwtRevocations(T0), [jti, sub])
      // Expired at expiresAt: no token it could match is valid any more.
      assert.deepEqual(await store.listJwtRevocations(T0 + 24 * HOUR), [])
      assert.equal(await store.removeJwtRevocation('r1'), true)
      assert.equal(await store.removeJwtRevocation('r1'), false)
      assert.deepEqual(await store.listJwtRevocations(T0), [sub])
    })

    it('keeps one rule per (issuer, kind, value): a second write widens it and keeps its id', async (t) => {
      const store = await open(t)
      await store.putJwtRevocation(rule('r1'))
      const again = await store.putJwtRevocation(
        rule('r9', {
          value: 'user-r1',
          issuedBefore: T0 + HOUR,
          expiresAt: T0 + 25 * HOUR,
          reason: 'again',
          createdAt: T0 + HOUR,
        }),
      )
      assert.equal(again.id, 'r1')
      assert.equal(again.issuedBefore, T0 + HOUR)
      assert.equal(again.expiresAt, T0 + 25 * HOUR)
      assert.equal(again.reason, 'again')
      // A narrower write never shrinks what is refused.
      const narrower = await store.putJwtRevocation(
        rule('r8', { value: 'user-r1', issuedBefore: T0 - HOUR, expiresAt: T0 + HOUR }),
      )
      assert.equal(narrower.issuedBefore, T0 + HOUR)
      assert.equal(narrower.expiresAt, T0 + 25 * HOUR)
      // Another issuer or kind with the same value is another rule.
      await store.putJwtRevocation(
        rule('r2', { value: 'user-r1', issuer: 'https://other.example/' }),
      )
      await store.putJwtRevocation(rule('r3', { value: 'user-r1', kind: 'tenant' }))
      assert.deepEqual(
        (await store.listJwtRevocations(T0)).map((r) => r.id),
        ['r1', 'r2', 'r3'],
      )
    })

    it('prunes expired rules only, in batches', async (t) => {
      const store = await open(t)
      for (let i = 0; i < 5; i++) {
        await store.putJwtRevocation(rule(`old${i}`, { expiresAt: T0 + i }))
      }
      await store.putJwtRevocation(rule('live', { expiresAt: T0 + 24 * HOUR }))
      assert.equal(await store.pruneJwtRevocations(T0 + 10, 3), 3)
      assert.equal(await store.pruneJwtRevocations(T0 + 10, 3), 2)
      assert.equal(await store.pruneJwtRevocations(T0 + 10, 3), 0)
      assert.deepEqual(
        (await store.listJwtRevocations(0)).map((r) => r.id),
        ['live'],
      )
    })

    it('delivers jwt_revocation_changed with the id for every write and delete', async (t) => {
      const store = await open(t)
      const seen: StoreChange[] = []
      const unwatch = store.watch((c) => seen.push(c))
      t.after(unwatch)
      await store.putJwtRevocation(rule('r1'))
      await store.putJwtRevocation(rule('r9', { value: 'user-r1', issuedBefore: T0 + 1 })) // r1, widened
      await store.removeJwtRevocation('r1')
      await store.putJwtRevocation(rule('r2', { expiresAt: T0 }))
      await store.pruneJwtRevocations(T0, 10)
      const want = ['r1', 'r1', 'r1', 'r2', 'r2']
      const deadline = Date.now() + 5000
      const ids = () => seen.flatMap((c) => (c.kind === 'jwt_revocation_changed' ? [c.id] : []))
      while (ids().length < want.length) {
        assert.ok(Date.now() < deadline, `delivered ${JSON.stringify(ids())}`)
        await new Promise((r) => setTimeout(r, 20))
      }
      assert.deepEqual(ids(), want)
    })
  })
}
