/**
 * What the Redis rate-limit counters cost per request in the serving process (issue #36): the
 * limiter's two counts of an allowed request (per token, then per tenant: two scripts, one
 * after the other) against a throwaway Redis on 127.0.0.1, 32 requests in flight, as a
 * served process under load has them. Per variant: CPU µs per request (process.cpuUsage of
 * this process; Redis's own CPU is not in it) and heap bytes allocated per request (V8's
 * GCProfiler: what each collection found used, minus what the previous left).
 *
 * Variants (rounds alternate between them, one client each): `this` (src/auth/redis-counters.ts)
 * and, with `--baseline TREE`, `RedisCounters` of that tree's src/auth/counter-store.ts (a
 * `git archive` of an older commit); each with auto-pipelining on (as `connectRedis` sets it)
 * and, with `--no-autopipe`, also off.
 *
 * Run: `node bench/redis-counters.bench.ts [--baseline TREE] [--rounds 6] [--requests 20000]
 * [--no-autopipe]`
 */

import { GCProfiler } from 'node:v8'
import type { CounterResult, Counters } from '../src/auth/counters.ts'
import { connectRedis, type RedisClient } from '../src/auth/redis-client.ts'
import { RedisCounters } from '../src/auth/redis-counters.ts'
import { startRedis } from '../test/helpers/services.ts'
import { readCli } from './cli.ts'
import { median } from './latency-stats.ts'

const { values } = readCli({
  script: 'bench/redis-counters.bench.ts',
  options: {
    baseline: { type: 'string', value: 'TREE' },
    rounds: { type: 'number', integer: true, default: 6 },
    requests: { type: 'number', integer: true, default: 20_000 },
    'no-autopipe': { type: 'boolean' },
  },
})
const ROUNDS = values.rounds
const REQUESTS = values.requests
const IN_FLIGHT = 32
const log = { warn: () => {}, info: () => {} }

const count = (counters: Counters, key: string) =>
  new Promise<CounterResult>((resolve, reject) =>
    counters.incr(
      key,
      (error, result) => (error || !result ? reject(error) : resolve(result)),
      60_000,
      1e9,
    ),
  )

async function run(token: Counters, tenant: Counters, requests: number): Promise<void> {
  let next = 0
  const worker = async (lane: number) => {
    while (next < requests) {
      next++
      const counted = await count(token, `pat:tok_${lane}`)
      if (counted.current < 1) throw new Error('bad count')
      await count(tenant, `tenant:t${lane % 4}`)
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, (_, lane) => worker(lane)))
}

/** CPU µs and heap bytes per request over one round. */
async function measure(token: Counters, tenant: Counters) {
  const profiler = new GCProfiler()
  profiler.start()
  const { heapUsed: startUsed } = process.memoryUsage()
  const cpu = process.cpuUsage()
  await run(token, tenant, REQUESTS)
  const spent = process.cpuUsage(cpu)
  const endUsed = process.memoryUsage().heapUsed
  const { statistics } = profiler.stop()
  let allocated = 0
  let left = startUsed
  for (const gc of statistics) {
    allocated += gc.beforeGC.heapStatistics.usedHeapSize - left
    left = gc.afterGC.heapStatistics.usedHeapSize
  }
  allocated += endUsed - left
  return {
    cpuUs: (spent.user + spent.system) / REQUESTS,
    bytes: allocated / REQUESTS,
  }
}

const redisServer = await startRedis()
const clients: RedisClient[] = []
try {
  type Make = new (client: RedisClient, prefix: string) => Counters
  const kinds: [string, Make][] = [['this', RedisCounters]]
  if (values.baseline) {
    const old = await import(`${values.baseline}/src/auth/counter-store.ts`)
    kinds.push(['baseline', old.RedisCounters as Make])
  }
  const variants: { name: string; token: Counters; tenant: Counters }[] = []
  for (const [name, Counted] of kinds) {
    for (const autopipe of values['no-autopipe'] ? [true, false] : [true]) {
      const client = await connectRedis(redisServer.url, { timeoutMs: 1000, log })
      if (!autopipe) client.options.enableAutoPipelining = false
      clients.push(client)
      const make = (prefix: string) => new Counted(client, prefix)
      variants.push({
        name: `${name}${autopipe ? '' : ' (no auto-pipelining)'}`,
        token: make(`rl:${name}${autopipe}:per-token:`),
        tenant: make(`rl:${name}${autopipe}:per-tenant:`),
      })
    }
  }
  for (const v of variants) await run(v.token, v.tenant, 5000) // warm-up
  const results = new Map<string, { cpuUs: number; bytes: number }[]>()
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? variants : [...variants].reverse()
    for (const v of order) {
      const m = await measure(v.token, v.tenant)
      results.set(v.name, [...(results.get(v.name) ?? []), m])
    }
  }
  console.log(
    `${ROUNDS} alternating rounds × ${REQUESTS} requests (2 counts each, ${IN_FLIGHT} in flight)`,
  )
  for (const [name, ms] of results) {
    const cpu = ms.map((m) => m.cpuUs)
    const bytes = ms.map((m) => m.bytes)
    console.log(
      `${name.padEnd(36)} CPU µs/req median ${median(cpu).toFixed(1)} (${cpu.map((x) => x.toFixed(1)).join(' ')}); heap bytes/req median ${median(bytes).toFixed(0)} (${bytes.map((x) => x.toFixed(0)).join(' ')})`,
    )
  }
} finally {
  for (const c of clients) c.disconnect()
  await redisServer.stop()
}
