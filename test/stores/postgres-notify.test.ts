import assert from 'node:assert/strict'
import { after, before, describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import {
  CHANGES_CHANNEL,
  type ChangeFeedOptions,
  decodeChange,
  encodeChange,
  startChangeFeed,
} from '../../src/stores/postgres-notify.ts'
import type { StoreChange } from '../../src/stores/store.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'

describe('change payloads', () => {
  const changes: StoreChange[] = [
    { kind: 'pat_changed', id: 'p1', tokenHash: 'ab'.repeat(32) },
    { kind: 'tenant_changed', id: 'Acme Corp' },
    { kind: 'issuers_changed' },
  ]

  it('every change round-trips with its origin', () => {
    for (const change of changes) {
      assert.deepEqual(decodeChange(encodeChange(change, 'instance-1')), {
        change,
        origin: 'instance-1',
      })
    }
  })

  it('anything unrecognised decodes to resync, never to nothing', () => {
    const garbage = [
      undefined,
      '',
      'not json',
      'null',
      '42',
      '"pat_changed"',
      '{}',
      '{"kind":"pat_changed","id":"p1"}',
      '{"kind":"pat_changed","id":1,"tokenHash":"x"}',
      '{"kind":"tenant_changed"}',
      '{"kind":"something_new","id":"x","origin":"o"}',
    ]
    for (const payload of garbage) {
      assert.deepEqual(
        decodeChange(payload),
        { change: { kind: 'resync' }, origin: undefined },
        String(payload),
      )
    }
  })

  it('extra fields are dropped from the delivered change', () => {
    const { change } = decodeChange('{"kind":"tenant_changed","id":"a","extra":1}')
    assert.deepEqual(change, { kind: 'tenant_changed', id: 'a' })
  })
})

const skip = skipReason('postgres')

describe('change feed on a real server', { skip }, () => {
  let server: PostgresServer
  before(async () => {
    server = await startPostgres()
  })
  after(() => server?.stop())

  async function notify(payload: string): Promise<void> {
    const client = new pg.Client({ connectionString: server.url })
    await client.connect()
    try {
      await client.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, payload])
    } finally {
      await client.end()
    }
  }

  async function open(t: TestContext, options: Partial<ChangeFeedOptions> = {}) {
    const received: { change: StoreChange; origin: string | undefined }[] = []
    const warnings: string[] = []
    const feed = await startChangeFeed({
      connectionString: server.url,
      onChange: (change, origin) => received.push({ change, origin }),
      logger: { warn: (_obj, msg) => warnings.push(msg) },
      ...options,
    })
    t.after(() => feed.close())
    return { feed, received, warnings }
  }

  async function until(check: () => boolean, timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs
    while (!check()) {
      if (Date.now() > deadline) throw new Error('condition not met in time')
      await sleep(10)
    }
  }

  const resyncs = (received: { change: StoreChange }[]) =>
    received.filter((r) => r.change.kind === 'resync').length

  it('delivers a notification from another connection with its origin', async (t) => {
    const { feed, received } = await open(t)
    assert.equal(feed.connected, true)
    await notify(encodeChange({ kind: 'tenant_changed', id: 'acme' }, 'other-instance'))
    await until(() => received.length > 0)
    assert.deepEqual(received, [
      { change: { kind: 'tenant_changed', id: 'acme' }, origin: 'other-instance' },
    ])
  })

  it('an unreadable payload is delivered as resync and logged', async (t) => {
    const { received, warnings } = await open(t)
    await notify('{"kind":"from_the_future"}')
    await until(() => received.length > 0)
    assert.deepEqual(received, [{ change: { kind: 'resync' }, origin: undefined }])
    assert.deepEqual(warnings, ['unrecognised store change'])
  })

  it('the heartbeat detects a frozen backend, resyncs and reconnects', async (t) => {
    const { feed, received } = await open(t, { heartbeatMs: 100, timeoutMs: 300 })
    const pid = feed.backendPid as number
    assert.ok(pid > 0)
    // SIGSTOP: the TCP connection stays open but nothing answers, as with a dead network
    // path; only the heartbeat can notice.
    process.kill(pid, 'SIGSTOP')
    t.after(() => {
      process.kill(pid, 'SIGCONT')
    })
    await until(() => resyncs(received) >= 1, 2000)
    await until(() => resyncs(received) >= 2 && feed.connected, 3000)
    assert.notEqual(feed.backendPid, pid)
    await notify(encodeChange({ kind: 'issuers_changed' }, 'x'))
    await until(() => received.some((r) => r.change.kind === 'issuers_changed'))
  })

  it('reconnects with exponential backoff while the server is down', async (t) => {
    const { feed, received, warnings } = await open(t, {
      reconnectInitialMs: 100,
      reconnectMaxMs: 5000,
    })
    await server.halt('fast')
    try {
      await until(() => resyncs(received) === 1)
      assert.equal(feed.connected, false)
      await sleep(1600)
      // Jittered delays of at least 50, 100, 200, 400, 800 ms: at most 5 attempts fit in
      // 1.6 s (a fixed 100 ms retry would have made about 16).
      const failed = warnings.filter((w) => w === 'store change feed reconnect failed').length
      assert.ok(failed >= 2 && failed <= 5, `${failed} reconnect attempts`)
    } finally {
      await server.start()
    }
    await until(() => feed.connected, 10_000)
    assert.equal(resyncs(received), 2, 'resync once when lost, once when re-subscribed')
    await notify(encodeChange({ kind: 'issuers_changed' }, 'x'))
    await until(() => received.some((r) => r.change.kind === 'issuers_changed'))
  })

  it('close() ends the listening connection and stops reconnecting', async (t) => {
    const { feed, warnings } = await open(t, { reconnectInitialMs: 20, reconnectMaxMs: 20 })
    const pid = feed.backendPid
    await feed.close()
    assert.equal(feed.connected, false)
    const client = new pg.Client({ connectionString: server.url })
    await client.connect()
    try {
      // The backend exits just after the client's Terminate message; give it a moment.
      let alive = true
      for (let i = 0; i < 100 && alive; i++) {
        const { rows } = await client.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])
        alive = rows.length > 0
        if (alive) await sleep(20)
      }
      assert.equal(alive, false, 'backend gone')
    } finally {
      await client.end()
    }
    await sleep(100)
    assert.deepEqual(warnings, [])
  })

  it('close() during an outage stops the reconnect loop', async (t) => {
    const { feed, warnings } = await open(t, { reconnectInitialMs: 20, reconnectMaxMs: 40 })
    await server.halt('fast')
    try {
      await until(() => warnings.includes('store change feed reconnect failed'))
      await feed.close()
      const count = warnings.length
      await sleep(300)
      assert.equal(warnings.length, count, 'no attempts after close')
      assert.equal(feed.connected, false)
    } finally {
      await server.start()
    }
  })
})
