import assert from 'node:assert/strict'
import { after, before, describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import {
  CHANGES_CHANNEL,
  type ChangeFeedOptions,
  startChangeFeed,
} from '../../src/stores/postgres-notify.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'

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
    const received = { wakes: 0 }
    const warnings: string[] = []
    const feed = await startChangeFeed({
      connectionString: server.url,
      onWake: () => received.wakes++,
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

  it('wakes once on subscribing, then once per notification, whatever its payload', async (t) => {
    const { feed, received } = await open(t)
    assert.equal(feed.connected, true)
    assert.equal(received.wakes, 1, 'a first read after subscribing')
    await notify('')
    await until(() => received.wakes === 2)
    await notify('{"kind":"from_the_future"}')
    await until(() => received.wakes === 3)
  })

  it('the heartbeat detects a frozen backend, reconnects and wakes', async (t) => {
    const { feed, received } = await open(t, { heartbeatMs: 100, timeoutMs: 300 })
    const pid = feed.backendPid as number
    assert.ok(pid > 0)
    // SIGSTOP: the TCP connection stays open but nothing answers, as with a dead network
    // path; only the heartbeat can notice.
    process.kill(pid, 'SIGSTOP')
    t.after(() => {
      process.kill(pid, 'SIGCONT')
    })
    await until(() => !feed.connected, 2000)
    await until(() => received.wakes >= 2 && feed.connected, 3000)
    assert.notEqual(feed.backendPid, pid)
    const wakes = received.wakes
    await notify('')
    await until(() => received.wakes > wakes)
  })

  it('reconnects with exponential backoff while the server is down', async (t) => {
    const { feed, received, warnings } = await open(t, {
      reconnectInitialMs: 100,
      reconnectMaxMs: 5000,
    })
    await server.halt('fast')
    try {
      await until(() => !feed.connected)
      await sleep(1600)
      // Jittered delays of at least 50, 100, 200, 400, 800 ms: at most 5 attempts fit in
      // 1.6 s (a fixed 100 ms retry would have made about 16).
      const failed = warnings.filter((w) => w === 'store change feed reconnect failed').length
      assert.ok(failed >= 2 && failed <= 5, `${failed} reconnect attempts`)
    } finally {
      await server.start()
    }
    await until(() => feed.connected, 10_000)
    assert.equal(received.wakes, 3, 'once when subscribed, when lost and when re-subscribed')
    await notify('')
    await until(() => received.wakes === 4)
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
