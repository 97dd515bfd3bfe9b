import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it, type TestContext } from 'node:test'
import { createOutboxWorker } from '../../src/events/outbox-worker.ts'
import { createWebhookSender, verifyWebhookSignature } from '../../src/events/webhook.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import type { Store, StoredAuditEvent } from '../../src/stores/store.ts'
import { startReceiver } from './receiver.ts'

const SECRET = 'whsec_outbox_worker_test'
const root = mkdtempSync(join(tmpdir(), 'tokengate-outbox-'))
after(() => rmSync(root, { recursive: true, force: true }))
let counter = 0

async function freshStore(t: TestContext): Promise<Store> {
  const store = openSqliteStore(join(root, `s${++counter}.db`), { externalChangePollMs: 0 })
  t.after(() => store.close())
  await store.migrate()
  return store
}

function event(id: string, time = Date.now()): StoredAuditEvent {
  return {
    id,
    time,
    type: 'auth.failed',
    tenantId: null,
    actor: 'sha256:0011aabb',
    outcome: 'invalid_token',
    clientAddress: '127.0.0.1',
    requestId: `req-${id}`,
    details: { path: '/api/v1/me' },
  }
}

describe('outbox worker (SQLite store, real receiver)', () => {
  it('delivers pending events in one signed batch and empties the outbox', async (t) => {
    const store = await freshStore(t)
    const receiver = await startReceiver()
    t.after(() => receiver.stop())
    await store.appendAudit([event('a'), event('b'), event('c')])
    const worker = createOutboxWorker({
      store,
      sender: createWebhookSender({ url: receiver.url, secret: SECRET, timeoutMs: 2000 }),
    })
    t.after(() => worker.close())
    assert.equal(await worker.runOnce(), 3)
    assert.equal(receiver.deliveries.length, 1)
    const [delivery] = receiver.deliveries
    assert.ok(delivery)
    assert.ok(
      verifyWebhookSignature(
        SECRET,
        String(delivery.headers['x-tokengate-signature']),
        delivery.body,
        Date.now() / 1000,
      ),
    )
    assert.deepEqual(receiver.eventIds(), ['a', 'b', 'c'])
    assert.deepEqual(await store.outboxStats(), { pending: 0, oldestTime: null })
    assert.equal(await worker.runOnce(), 0, 'nothing left')
    assert.equal(worker.stats().delivered, 3)
  })

  it('batches by batchSize and goes on at once while batches are full', async (t) => {
    const store = await freshStore(t)
    const receiver = await startReceiver()
    t.after(() => receiver.stop())
    await store.appendAudit(Array.from({ length: 25 }, (_, i) => event(`e${i}`)))
    const worker = createOutboxWorker({
      store,
      sender: createWebhookSender({ url: receiver.url, secret: SECRET, timeoutMs: 2000 }),
      batchSize: 10,
      pollIntervalMs: 60_000,
    })
    t.after(() => worker.close())
    worker.start()
    await receiver.waitForEvents(25, 5000)
    assert.deepEqual(
      receiver.deliveries.map((d) => d.events.length),
      [10, 10, 5],
    )
  })

  it('receiver down, then up: retried with backoff and delivered, nothing lost', async (t) => {
    const store = await freshStore(t)
    const receiver = await startReceiver()
    t.after(() => receiver.stop())
    await receiver.stop()
    const warnings: object[] = []
    const worker = createOutboxWorker({
      store,
      sender: createWebhookSender({ url: receiver.url, secret: SECRET, timeoutMs: 1000 }),
      pollIntervalMs: 20,
      retryInitialMs: 40,
      retryMaxMs: 160,
      log: { warn: (obj) => warnings.push(obj) },
    })
    t.after(() => worker.close())
    await store.appendAudit([event('x1'), event('x2')])
    worker.start()
    while (worker.stats().failedAttempts < 3) await new Promise((r) => setTimeout(r, 20))
    assert.equal(receiver.deliveries.length, 0)
    const probe = await store.claimOutbox(Date.now() + 10_000, 10, 1)
    assert.ok((probe[0]?.attempts ?? 0) >= 1, 'failed attempts are counted on the entries')
    await store.retryOutbox(
      probe.map((e) => e.event.id),
      0,
      'released by the test',
    )
    assert.match(JSON.stringify(warnings[0]), /ECONNREFUSED/)
    await store.appendAudit([event('x3')])
    await receiver.start()
    await receiver.waitForEvents(3, 5000)
    assert.deepEqual([...new Set(receiver.eventIds())].sort(), ['x1', 'x2', 'x3'])
    // The receiver has the events before the worker has read its 2xx and deleted them from
    // the outbox: wait (bounded) for the worker to settle instead of racing it.
    const settleBy = Date.now() + 5000
    while (
      (worker.stats().consecutiveFailures !== 0 || (await store.outboxStats()).pending !== 0) &&
      Date.now() < settleBy
    ) {
      await new Promise((r) => setTimeout(r, 20))
    }
    assert.equal(worker.stats().consecutiveFailures, 0)
    const pending = await store.outboxStats()
    assert.equal(pending.pending, 0)
  })

  it('backoff grows exponentially with jitter, capped, and honours Retry-After', async (t) => {
    const store = await freshStore(t)
    const receiver = await startReceiver('fail')
    t.after(() => receiver.stop())
    const now = { t: 1_000_000 }
    await store.appendAudit([event('r1', now.t)])
    const worker = createOutboxWorker({
      store,
      sender: createWebhookSender({ url: receiver.url, secret: SECRET, timeoutMs: 1000 }),
      clock: { now: () => now.t },
      retryInitialMs: 1000,
      retryMaxMs: 8000,
      random: () => 0.5,
    })
    t.after(() => worker.close())
    const observed: number[] = []
    for (let i = 0; i < 6; i++) {
      await worker.runOnce()
      let due = -1
      for (let ms = 0; ms <= 10_000; ms += 250) {
        // A probe claim with a 1 ms lease: it expires as soon as the clock moves past it.
        if ((await store.claimOutbox(now.t + ms, 1, 1)).length > 0) {
          due = ms
          break
        }
      }
      observed.push(due)
      now.t += due + 1
    }
    // Equal jitter with random() = 0.5: 3/4 of min(8000, 1000 * 2^(n-1)).
    assert.deepEqual(observed, [750, 1500, 3000, 6000, 6000, 6000])

    receiver.retryAfter = 60
    await worker.runOnce()
    assert.equal((await store.claimOutbox(now.t + 59_000, 1, 1)).length, 0, 'Retry-After wins')
    assert.equal((await store.claimOutbox(now.t + 60_000, 1, 1)).length, 1)
    assert.equal(receiver.deliveries.length, 0)
  })

  it('close aborts a delivery to a hanging receiver at once and releases its events', async (t) => {
    const store = await freshStore(t)
    const receiver = await startReceiver('hang')
    t.after(() => receiver.stop())
    await store.appendAudit([event('h1')])
    const worker = createOutboxWorker({
      store,
      sender: createWebhookSender({ url: receiver.url, secret: SECRET, timeoutMs: 30_000 }),
    })
    worker.start()
    await new Promise((r) => setTimeout(r, 200))
    const started = Date.now()
    await worker.close()
    assert.ok(Date.now() - started < 1000, 'close does not wait for the receiver')
    const [entry] = await store.claimOutbox(Date.now(), 10, 1000)
    assert.equal(entry?.event.id, 'h1', 'released: due again immediately, not lost')
  })
})
