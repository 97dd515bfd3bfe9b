import assert from 'node:assert/strict'
import { after, before, describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { Cluster, Redis } from 'ioredis'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import {
  type RedisClusterSetup,
  type RedisSentinelSetup,
  skipReason,
  startRedisCluster,
  startRedisSentinel,
} from '../helpers/services.ts'

/**
 * A Redis failover under load (issue #25): tokengate counts per-token limits in Redis
 * through Sentinel or Cluster while the master holding the counter is killed (SIGKILL).
 * No request may get a 5xx, and counting must go on in Redis on the new master. What is
 * lost is measured: the requests counted in-process while no master answered, plus any
 * increments the old master acknowledged but had not replicated.
 */
const PREFIX = 'failover:'
const LIMIT = { perToken: { max: 1_000_000, windowSec: 600 }, redisPrefix: PREFIX }

interface Load {
  readonly statuses: Map<number, number>
  /** Requests answered so far. */
  count(): number
  /**
   * Runs `read` with no request in flight (the next one waits for it): a count and a read of
   * Redis taken together then cover the same requests however long the read takes.
   */
  between<T>(read: () => Promise<T>): Promise<T>
  stop(): Promise<void>
}

/** Sends requests back to back with the demo PAT until stopped. */
function startLoad(server: TestServer): Load {
  const token = server.running.devSeed?.demoPat as string
  const statuses = new Map<number, number>()
  let answered = 0
  let running = true
  // Resolved when the request in flight is answered; the loop waits for `held` before the next.
  let idle: Promise<void> = Promise.resolve()
  let held: Promise<unknown> = Promise.resolve()
  const loop = (async () => {
    while (running) {
      await held
      if (!running) break
      let answeredNow = () => {}
      idle = new Promise((resolve) => {
        answeredNow = resolve
      })
      const reply = await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])
      statuses.set(reply.status, (statuses.get(reply.status) ?? 0) + 1)
      answered++
      answeredNow()
    }
  })()
  return {
    statuses,
    count: () => answered,
    async between(read) {
      let release = () => {}
      held = new Promise<void>((resolve) => {
        release = resolve
      })
      await idle
      try {
        return await read()
      } finally {
        release()
      }
    },
    async stop() {
      running = false
      await loop
    },
  }
}

/**
 * The per-token counter as Redis holds it now (0 before the first count): the highest value
 * on the surviving nodes, since replicas only ever lag their master.
 */
async function counterIn(ports: readonly number[]): Promise<number> {
  let highest = 0
  for (const port of ports) {
    const node = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0 })
    node.on('error', () => {})
    try {
      await node.connect()
      for (const key of await node.keys(`${PREFIX}per-token:*`)) {
        highest = Math.max(highest, Number(await node.get(key)))
      }
    } catch {
      // Not answering (the killed node): skip.
    } finally {
      node.disconnect()
    }
  }
  return highest
}

async function failoverUnderLoad(
  t: TestContext,
  server: TestServer,
  survivors: readonly number[],
  failover: () => Promise<void>,
  label: string,
) {
  const load = startLoad(server)
  try {
    await sleep(1000)
    const beforeKill = load.count()
    const killedAt = performance.now()
    await failover()
    const switchedMs = performance.now() - killedAt
    // Counting in Redis again: the counter on the new master moves with the requests.
    const promoted = await counterIn(survivors)
    let first = promoted
    const deadline = performance.now() + 15_000
    while (first === promoted && performance.now() < deadline) {
      await sleep(20)
      first = await counterIn(survivors).catch(() => promoted)
    }
    const resumedMs = performance.now() - killedAt
    // Both ends of the window read with no request in flight: the requests made in it are
    // exactly those counted in it (a read racing the load had them differ by its length).
    const [atFirst, firstCounted] = await load.between(
      async () => [load.count(), await counterIn(survivors)] as const,
    )
    await sleep(1500)
    const [atEnd, last] = await load.between(
      async () => [load.count(), await counterIn(survivors)] as const,
    )
    await load.stop()
    const total = load.count()
    const final = await counterIn(survivors)
    assert.deepEqual([...load.statuses.keys()], [200], JSON.stringify([...load.statuses]))
    const counted = last - firstCounted
    const made = atEnd - atFirst
    t.diagnostic(
      `${label}: master killed after ${beforeKill} requests, the promoted replica held ${promoted} (${Math.max(0, beforeKill - promoted)} lost unreplicated); promoted after ${switchedMs.toFixed(0)} ms; counting in Redis again after ${resumedMs.toFixed(0)} ms; ${total} requests, all 200; ${total - final} counted in-process meanwhile; afterwards ${counted} counted in Redis for ${made} made`,
    )
    // Counting goes on in Redis: one per request, each counted before it is answered.
    assert.equal(counted, made, `counted ${counted} of ${made} after the failover`)
    assert.ok(final <= total)
  } finally {
    await load.stop()
  }
}

describe('rate-limit counters through Redis Sentinel: the master killed under load', {
  skip: skipReason('redis-sentinel'),
}, () => {
  let sentinel: RedisSentinelSetup
  let server: TestServer
  before(async () => {
    sentinel = await startRedisSentinel()
    server = await startTestServer({
      redisUrl: sentinel.url,
      rateLimit: LIMIT,
      log: { level: 'warn' },
    })
  })
  after(async () => {
    await server?.close()
    await sentinel?.stop()
  })

  it('no 5xx, and the new master keeps counting', async (t) => {
    const asker = new Redis({ port: sentinel.sentinelPort, host: '127.0.0.1' })
    t.after(() => asker.disconnect())
    await failoverUnderLoad(
      t,
      server,
      [sentinel.replica.port],
      async () => {
        await sentinel.master.kill()
        for (;;) {
          const [, port] = (await asker.call(
            'SENTINEL',
            'get-master-addr-by-name',
            sentinel.name,
          )) as [string, string]
          if (Number(port) === sentinel.replica.port) return
          await sleep(50)
        }
      },
      'Sentinel',
    )
  })
})

describe('rate-limit counters through a Redis Cluster: a master killed under load', {
  skip: skipReason('redis'),
}, () => {
  let cluster: RedisClusterSetup
  let server: TestServer
  before(async () => {
    cluster = await startRedisCluster()
    server = await startTestServer({
      redisUrl: cluster.url,
      rateLimit: LIMIT,
      log: { level: 'warn' },
    })
  })
  after(async () => {
    await server?.close()
    await cluster?.stop()
  })

  it('no 5xx, and the promoted replica keeps counting', async (t) => {
    const seeds = cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port }))
    const admin = new Cluster(seeds)
    t.after(() => admin.disconnect())
    // The master that holds the counter, found once the first request has counted.
    await server.request('/api/v1/me', [
      'Authorization',
      `Bearer ${server.running.devSeed?.demoPat as string}`,
    ])
    let owner: number | undefined
    let key: string | undefined
    for (const node of admin.nodes('master')) {
      const [found] = await node.keys(`${PREFIX}per-token:*`)
      if (found) {
        owner = node.options.port
        key = found
      }
    }
    assert.ok(owner && key, 'the counter is in the cluster')
    const slot = (await admin.cluster('KEYSLOT', key)) as number
    const victim = cluster.nodes.find((node) => node.port === owner)
    assert.ok(victim)
    const survivors = seeds.map((seed) => seed.port).filter((port) => port !== owner)
    await failoverUnderLoad(
      t,
      server,
      survivors,
      async () => {
        await victim.kill()
        const survivor = new Redis({ host: '127.0.0.1', port: survivors[0] })
        try {
          // Promoted: a live node serves the counter's slot, and the cluster is whole again.
          for (;;) {
            const ranges = (await survivor.call('CLUSTER', 'SLOTS')) as [
              number,
              number,
              [string, number],
            ][]
            const range = ranges.find(([from, to]) => from <= slot && slot <= to)
            const info = (await survivor.call('CLUSTER', 'INFO')) as string
            if (range && range[2][1] !== owner && info.includes('cluster_state:ok')) return
            await sleep(50)
          }
        } finally {
          survivor.disconnect()
        }
      },
      'Cluster',
    )
  })
})
