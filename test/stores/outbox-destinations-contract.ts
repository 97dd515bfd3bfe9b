/**
 * The store contract of the outbox's destinations (issue #34, the CAEP transmitter), run by
 * `storeContract` for every backend: each destination gets its own entry for the event types
 * it takes, in the transaction that stores the event, and is claimed, retried, completed and
 * dropped on its own; the webhook's queue (`''`) is as before.
 */
import assert from 'node:assert/strict'
import { describe, it, type TestContext } from 'node:test'
import type { Store, StoredAuditEvent } from '../../src/stores/store.ts'
import { event, type MakeStore, T0 } from './contract.ts'

function typed(id: string, type: string): StoredAuditEvent {
  return { ...event(id, 'acme', T0), type }
}

const ids = (entries: readonly { event: { id: string } }[]) => entries.map((e) => e.event.id)

export function outboxDestinationsContract(name: string, makeStore: MakeStore): void {
  async function open(t: TestContext): Promise<Store> {
    const { store, cleanup } = await makeStore()
    t.after(cleanup)
    await store.migrate()
    return store
  }

  describe(`${name} store contract: outbox destinations`, () => {
    it('each destination gets the events of its types, on its own queue beside the webhook', async (t) => {
      const store = await open(t)
      await store.setOutboxDestinations([
        { name: 'ssf a', eventTypes: ['pat.revoked'] },
        { name: 'ssf b', eventTypes: ['pat.revoked', 'pat.disabled'] },
      ])
      await store.appendAudit([
        typed('e1', 'pat.revoked'),
        typed('e2', 'tenant.created'),
        typed('e3', 'pat.disabled'),
      ])
      assert.deepEqual(ids(await store.claimOutbox(T0, 10, 1000)), ['e1', 'e2', 'e3'])
      assert.deepEqual(ids(await store.claimOutbox(T0, 10, 1000, 'ssf a')), ['e1'])
      assert.deepEqual(ids(await store.claimOutbox(T0, 10, 1000, 'ssf b')), ['e1', 'e3'])
      assert.deepEqual(await store.outboxStats(), { pending: 6, oldestTime: T0 })

      // A failure of one destination defers only its own entry; completing one leaves the rest.
      await store.retryOutbox(['e1'], T0 + 5000, 'HTTP 503', 'ssf a')
      await store.completeOutbox(['e1', 'e3'], 'ssf b')
      assert.deepEqual(ids(await store.claimOutbox(T0 + 1000, 10, 1000, 'ssf a')), [])
      assert.deepEqual(ids(await store.claimOutbox(T0 + 5000, 10, 1000, 'ssf a')), ['e1'])
      assert.deepEqual(ids(await store.claimOutbox(T0 + 5000, 10, 1000, 'ssf b')), [])
      assert.deepEqual(ids(await store.claimOutbox(T0 + 5000, 10, 1000)), ['e1', 'e2', 'e3'])

      // No webhook: its queue is emptied, the receivers' entries stay.
      assert.equal(await store.clearOutbox(), 3)
      assert.deepEqual(ids(await store.claimOutbox(T0 + 9000, 10, 1000, 'ssf a')), ['e1'])
    })

    it('a destination no longer listed loses its entries and gets no more', async (t) => {
      const store = await open(t)
      await store.setOutboxDestinations([
        { name: 'ssf a', eventTypes: ['pat.revoked'] },
        { name: 'ssf b', eventTypes: ['pat.revoked'] },
      ])
      await store.appendAudit([typed('e1', 'pat.revoked')])
      await store.setOutboxDestinations([{ name: 'ssf b', eventTypes: ['pat.revoked'] }])
      await store.appendAudit([typed('e2', 'pat.revoked')])
      assert.deepEqual(ids(await store.claimOutbox(T0, 10, 1000, 'ssf a')), [])
      assert.deepEqual(ids(await store.claimOutbox(T0, 10, 1000, 'ssf b')), ['e1', 'e2'])
      await store.setOutboxDestinations([])
      await store.appendAudit([typed('e3', 'pat.revoked')])
      assert.deepEqual(ids(await store.claimOutbox(T0 + 2000, 10, 1000, 'ssf b')), [])
      assert.deepEqual(ids(await store.claimOutbox(T0 + 2000, 10, 1000)), ['e1', 'e2', 'e3'])
    })

    it('webhook: false queues for the destinations only', async (t) => {
      const store = await open(t)
      await store.setOutboxDestinations([{ name: 'ssf a', eventTypes: ['pat.revoked'] }])
      await store.appendAudit([typed('e1', 'pat.revoked'), typed('e2', 'auth.failed')], {
        webhook: false,
      })
      assert.deepEqual(ids(await store.claimOutbox(T0, 10, 1000)), [])
      assert.deepEqual(ids(await store.claimOutbox(T0, 10, 1000, 'ssf a')), ['e1'])
      assert.deepEqual(await store.outboxStats(), { pending: 1, oldestTime: T0 })
    })

    it('appendAudit with queue: false queues for no destination', async (t) => {
      const store = await open(t)
      await store.setOutboxDestinations([{ name: 'ssf a', eventTypes: ['pat.revoked'] }])
      await store.appendAudit([typed('e1', 'pat.revoked')], { queue: false })
      assert.deepEqual(await store.outboxStats(), { pending: 0, oldestTime: null })
    })
  })
}
