/**
 * The store contract of the CAEP/SSF receiver's replay check (issue #34), run by
 * `storeContract` for every backend: a (transmitter, jti) is new once, a replay after that
 * (also when recorded concurrently), and expired records are pruned.
 */
import assert from 'node:assert/strict'
import { describe, it, type TestContext } from 'node:test'
import type { Store } from '../../src/stores/store.ts'
import { type MakeStore, T0 } from './contract.ts'

const TX = 'https://transmitter.example'

export function ssfReceivedContract(name: string, makeStore: MakeStore): void {
  async function open(t: TestContext): Promise<Store> {
    const { store, cleanup } = await makeStore()
    t.after(cleanup)
    await store.migrate()
    return store
  }

  describe(`${name} store contract: SETs received (replay check)`, () => {
    it('a (transmitter, jti) is new once and a replay after that, per transmitter', async (t) => {
      const store = await open(t)
      assert.equal(await store.recordSsfReceived(TX, 'set-1', T0, T0 + 1000), true)
      assert.equal(await store.recordSsfReceived(TX, 'set-1', T0 + 5, T0 + 2000), false)
      assert.equal(await store.recordSsfReceived(TX, 'set-2', T0, T0 + 1000), true)
      assert.equal(await store.recordSsfReceived(`${TX}/other`, 'set-1', T0, T0 + 1000), true)
    })

    it('a forgotten record (its SET not applied) is new again on the next delivery', async (t) => {
      const store = await open(t)
      assert.equal(await store.recordSsfReceived(TX, 'set-f', T0, T0 + 1000), true)
      await store.forgetSsfReceived(TX, 'set-f')
      await store.forgetSsfReceived(TX, 'never-recorded')
      assert.equal(await store.recordSsfReceived(TX, 'set-f', T0, T0 + 1000), true)
      assert.equal(await store.recordSsfReceived(TX, 'set-f', T0, T0 + 1000), false)
    })

    it('of ten concurrent records of one jti exactly one is new', async (t) => {
      const store = await open(t)
      const results = await Promise.all(
        Array.from({ length: 10 }, () => store.recordSsfReceived(TX, 'race', T0, T0 + 1000)),
      )
      assert.equal(results.filter(Boolean).length, 1)
    })

    it('prunes what expired, in batches, and keeps the rest', async (t) => {
      const store = await open(t)
      for (let i = 0; i < 5; i++) await store.recordSsfReceived(TX, `old-${i}`, T0, T0 + i)
      await store.recordSsfReceived(TX, 'live', T0, T0 + 10_000)
      assert.equal(await store.pruneSsfReceived(T0 + 4, 3), 3)
      assert.equal(await store.pruneSsfReceived(T0 + 4, 3), 2)
      assert.equal(await store.pruneSsfReceived(T0 + 4, 3), 0)
      assert.equal(await store.recordSsfReceived(TX, 'live', T0, T0 + 10_000), false)
      assert.equal(await store.recordSsfReceived(TX, 'old-0', T0, T0 + 10_000), true)
    })
  })
}
