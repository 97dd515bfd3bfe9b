/**
 * What quotas and usage counting cost per request on the cached-PAT path (issue #24), in
 * ns/op, in one process: four gates built as `openGate` builds them (the cached lookups, the
 * in-process rate limits, the outcome recorder with last-used times; a SQLite store for the
 * quota counts) decide the same cached PAT's request, differing only in
 *
 *   plain          a key without quota, usage counting off
 *   usage          a key without quota, usage counting on (the default)
 *   quota          a key with a quota (10^12 uses, blocks up to 1,000), usage counting off
 *   quota+usage    both
 *   quota (mem)    the quota step over an in-process count instead of SQLite: its CPU alone,
 *                  without the store write a block costs (a SQLite write is synchronous and
 *                  fsync'd, so it is paid on the event loop; Postgres's is a round trip)
 *
 * The gates run interleaved in many short rounds (a round: each gate `--requests` decisions,
 * in a rotating order), so that drift on a shared machine hits them alike; printed are the
 * median per gate and the median over rounds of its difference from `plain` in the same round
 * (paired, so a round slowed by a neighbour's load cancels out), with the interquartile range
 * of that difference. A quota block's store round trip (one per
 * 100 uses) is included in the quota rows, as the request that triggers it pays it.
 *
 * Run: node --expose-gc bench/keys.bench.ts [--rounds 60] [--requests 5000] [--json]
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { FallbackStore } from '../src/auth/counter-store.ts'
import { createGate, type Gate, type GateRequest } from '../src/auth/gate.ts'
import { createLimiter } from '../src/auth/limiter.ts'
import { createOutcomeRecorder } from '../src/auth/outcome-recorder.ts'
import { createQuotaCounter } from '../src/auth/quota-counter.ts'
import type { ReuseDetector } from '../src/auth/reuse-detector.ts'
import { loadConfig } from '../src/config/load.ts'
import { createMaybeSyncAuthenticator } from '../src/core/authenticate.ts'
import { issuePat } from '../src/core/pat.ts'
import type { PatRecord } from '../src/core/ports.ts'
import { isPromiseLike } from '../src/lib/maybe-async.ts'
import { createCachedLookups } from '../src/stores/cached-lookups.ts'
import { openSqliteStore } from '../src/stores/sqlite.ts'
import { createUsageWriter } from '../src/stores/usage-writer.ts'
import { createPatUseRecorder } from '../src/stores/write-behind.ts'
import { readCli } from './cli.ts'
import { median, percentile } from './latency-stats.ts'

const { values } = readCli({
  script: 'bench/keys.bench.ts',
  options: {
    rounds: { type: 'number', integer: true, default: 60 },
    requests: { type: 'number', integer: true, default: 5000 },
    json: { type: 'boolean' },
  },
})
const ROUNDS = values.rounds
const REQUESTS = values.requests
const json = values.json
const TENANT = 'bench'
const clock = { now: () => Date.now() }

const dir = mkdtempSync(join(tmpdir(), 'tg-keys-bench-'))
const store = openSqliteStore(join(dir, 'db.sqlite'))
await store.migrate()
await store.createTenant({ id: TENANT, name: 'Bench' }, clock.now())

function key(quota: boolean): { token: string; record: PatRecord } {
  const { token, record } = issuePat({
    tenantId: TENANT,
    subject: 'bench',
    name: 'bench',
    permissions: ['tokens:read'],
    expiresAt: null,
    now: clock.now(),
  })
  return {
    token,
    record: quota
      ? { ...record, quota: { limit: 1_000_000_000_000, refill: 'none', counter: record.id } }
      : record,
  }
}

const plainKey = key(false)
const quotaKey = key(true)
const records = new Map([plainKey, quotaKey].map((k) => [k.record.tokenHash, k.record]))
const tenant = { id: TENANT, name: 'Bench', enabled: true, createdAt: 0, rateLimit: null }
const lookups = createCachedLookups(
  {
    findPatByHash: async (hash) => records.get(hash),
    findTenant: async (id) => (id === TENANT ? tenant : undefined),
  },
  { ttlMs: 3_600_000 },
)
// No JWT in this bench: a verifier that refuses everything stands in for the issuers.
const jwt = {
  verify: async () => ({ ok: false as const, failure: { code: 'missing_authorization' as const } }),
  close() {},
}
const authenticate = createMaybeSyncAuthenticator({ lookups: lookups.maybeSync, jwt, clock })
const config = loadConfig({ env: {}, overrides: { server: { plainHttp: true } } })
const many = { max: 1_000_000_000, windowSec: 60 }
const unlimited = { ...config.rateLimit, perToken: many, perTenant: many }
const reuse: ReuseDetector = { onFailure() {}, settled: async () => {} } as unknown as ReuseDetector

/** An in-process quota count: the quota step's own CPU, no store write. */
const memoryCounts = new Map<string, number>()
const memoryQuotaStore = {
  async reserveQuota(counter: string, periodStart: number, limit: number, want: number) {
    const used = memoryCounts.get(counter) ?? 0
    const granted = Math.max(0, Math.min(want, limit - used))
    memoryCounts.set(counter, used + granted)
    return { granted, used: used + granted, periodStart, generation: 0 }
  },
  async releaseQuota() {},
}

function gate(
  withUsage: boolean,
  withQuota: boolean | 'memory',
): { gate: Gate; close(): Promise<void> } {
  const counters = new FallbackStore({
    redisPrefix: '',
    localMaxKeys: config.rateLimit.localMaxKeys,
    log: { warn() {}, info() {} },
  })
  const usage = withUsage ? createUsageWriter(store, { clock, flushIntervalMs: 5000 }) : undefined
  const quotas = withQuota
    ? createQuotaCounter({ store: withQuota === 'memory' ? memoryQuotaStore : store, clock })
    : undefined
  const recorder = createOutcomeRecorder({
    audit: { write() {} },
    patUse: createPatUseRecorder(store, { flushIntervalMs: 1000, resolutionMs: 60_000, clock }),
    reuse,
    clock,
    failedAuthWindowSec: 60,
    usage,
  })
  return {
    gate: createGate({
      authenticate,
      limiter: createLimiter(unlimited, counters),
      recorder,
      tenantLimit: (id) => {
        const found = lookups.maybeSync.findTenant(id)
        return isPromiseLike(found)
          ? Promise.resolve(found).then((t) => t?.rateLimit)
          : found?.rateLimit
      },
      quotas,
    }),
    async close() {
      await usage?.close()
      await quotas?.close()
    },
  }
}

const request = (token: string): GateRequest => ({
  method: 'GET',
  target: '/api/v1/me',
  authorization: [`Bearer ${token}`],
  tenantIds: [],
  clientAddress: '127.0.0.1',
  requestId: 'bench',
  access: { permissions: ['tokens:read'] },
})

const variants = [
  { name: 'plain', ...gate(false, false), request: request(plainKey.token) },
  { name: 'usage', ...gate(true, false), request: request(plainKey.token) },
  { name: 'quota', ...gate(false, true), request: request(quotaKey.token) },
  { name: 'quota+usage', ...gate(true, true), request: request(quotaKey.token) },
  { name: 'quota (mem)', ...gate(false, 'memory'), request: request(quotaKey.token) },
]

async function run(variant: (typeof variants)[number], count: number): Promise<number> {
  const start = process.hrtime.bigint()
  for (let i = 0; i < count; i++) {
    const outcome = variant.gate.check(variant.request)
    const settled = isPromiseLike(outcome) ? await outcome : outcome
    if (!settled.allowed) throw new Error(`${variant.name}: refused ${settled.failure.code}`)
  }
  return Number(process.hrtime.bigint() - start) / count
}

// Warm-up: caches filled, JIT settled, first quota blocks reserved.
for (let i = 0; i < 5; i++) for (const v of variants) await run(v, REQUESTS)
const samples = new Map<string, number[]>(variants.map((v) => [v.name, []]))
for (let round = 0; round < ROUNDS; round++) {
  const order = variants.map(
    (_, i) => variants[(i + round) % variants.length] as (typeof variants)[number],
  )
  for (const v of order) {
    ;(globalThis as { gc?: () => void }).gc?.()
    samples.get(v.name)?.push(await run(v, REQUESTS))
  }
}
const plainRounds = samples.get('plain') ?? []
const rows = variants.map((v) => {
  const own = samples.get(v.name) ?? []
  const paired = own.map((ns, i) => ns - (plainRounds[i] as number)).sort((a, b) => a - b)
  return {
    gate: v.name,
    'ns/op': Math.round(median(own)),
    'vs plain (ns, paired median)': Math.round(median(paired)),
    'IQR of that (ns)': `${Math.round(percentile(paired, 25))} .. ${Math.round(percentile(paired, 75))}`,
  }
})
for (const v of variants) await v.close()
await store.close()
rmSync(dir, { recursive: true, force: true })
if (json) console.log(JSON.stringify(rows))
else {
  console.log(`node ${process.version}, ${ROUNDS} rounds × ${REQUESTS} decisions per gate, medians`)
  console.table(rows)
}
