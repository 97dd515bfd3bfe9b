/**
 * The chaos suite (issue #25): two real `tokengate serve` instances (B with
 * `server.workers: 2`) on one real Postgres and a Redis behind Sentinel, under a steady paced
 * load of valid, invalid, unknown and revoked PATs, while the suite
 *
 *  1. revokes keys through A's API,
 *  2. SIGKILLs instance B (its primary and both workers at once) and starts it again,
 *  3. revokes keys with the CLI,
 *  4. terminates every instance's LISTEN connection (pg_terminate_backend) and revokes keys
 *     with plain SQL at once,
 *  5. SIGKILLs the Redis master (Sentinel promotes the replica) and revokes through B's API,
 *  6. restarts Postgres, and revokes through A's API as soon as it answers.
 *
 * It prints what survived (docs/scale-out.md, "Chaos") and asserts the hard promises:
 * - no 5xx but a 503 `unavailable` to a request in flight while Postgres was down (SPEC: an
 *   unreachable store fails closed), up to RECOVERY_GRACE_MS after it answers again;
 * - no key accepted more than REVOCATION_BOUND_MS after its revoke committed, no key revoked
 *   before the run ever accepted, and every revoked key refused by every instance at the end;
 * - every 401 answered has its audit event, beyond what `audit.dropped` counts.
 *
 * Run: `npm run test:chaos` (about a minute; CI runs it).
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { issuePat } from '../../src/core/pat.ts'
import {
  childrenOf,
  type ServeProcess,
  spawnServe,
  statusOnFreshConnection,
} from '../helpers/serve-process.ts'
import {
  freePort,
  type PostgresServer,
  type RedisSentinelSetup,
  skipReason,
  startPostgres,
  startRedisSentinel,
} from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { cli, insertPat, openAdminStore } from '../scale/cluster.ts'
import { type Credential, startLoad } from './load.ts'
import {
  POSTGRES_NEVER_DOWN,
  type RunFacts,
  stopPostgresFor,
  survival,
  survivalTables,
  timeline,
} from './report.ts'

/** DESIGN.md: every change reaches every instance within a second. */
const REVOCATION_BOUND_MS = 1000
/** After Postgres answers again: one change-log poll (500 ms) and the pool's reconnect. */
const RECOVERY_GRACE_MS = 1000
const RATE = 150
const TENANT = 'chaos'

const skip = skipReason('postgres') || skipReason('redis-sentinel')

describe('chaos: two instances, Postgres and Redis Sentinel under load and faults', {
  skip: skip || (process.platform !== 'linux' && 'needs /proc'),
}, () => {
  let postgres: PostgresServer | undefined
  let redis: RedisSentinelSetup | undefined
  const instances: ServeProcess[] = []
  after(async () => {
    for (const instance of instances) await instance.stop()
    await redis?.stop()
    await postgres?.stop()
  })

  it('survives an instance kill, a Postgres restart, a lost LISTEN and a Redis failover', async () => {
    postgres = await startPostgres()
    redis = await startRedisSentinel()
    const databaseUrl = await postgres.createDatabase()
    const store = await openAdminStore(databaseUrl)
    await store.createTenant({ id: TENANT, name: 'Chaos' }, Date.now())
    const admin = await insertPat(store, TENANT, ['tokens:revoke'])
    const credentials: Credential[] = []
    const add = async (kind: Credential['kind'], count: number) => {
      for (let i = 0; i < count; i++) {
        if (kind === 'invalid') {
          credentials.push({ kind, token: `pat_${Math.random().toString(36).slice(2)}notvalid` })
        } else if (kind === 'unknown') {
          // Well-formed (checksum and all), never stored: every use is a store lookup.
          const { token } = issuePat({
            tenantId: TENANT,
            subject: 'nobody',
            name: 'never stored',
            permissions: [],
            expiresAt: null,
            now: Date.now(),
          })
          credentials.push({ kind, token })
        } else {
          credentials.push({ kind, ...(await insertPat(store, TENANT)) })
        }
      }
    }
    await add('valid', 30)
    await add('revoking', 25)
    await add('revoked', 5)
    await add('invalid', 10)
    await add('unknown', 10)
    const revokeBefore = credentials.filter((c) => c.kind === 'revoked')
    for (const c of revokeBefore) await store.revokePat(c.id as string, Date.now())
    await store.close()
    const batches = chunks(
      credentials.filter((c) => c.kind === 'revoking').map((c) => c.id as string),
      5,
    )

    // Two instances: A one process, B a primary and two workers; each its own data dir.
    // Limits high enough that the load (one address) is never throttled, but counted in
    // Redis; a 5-minute lookup cache, so that only the change log can explain a refusal.
    const config = join(tempDir('tg-chaos-'), 'config.json')
    writeFileSync(
      config,
      JSON.stringify({
        auth: { lookupCacheTtlMs: 300_000 },
        rateLimit: { failedAuth: { max: 1_000_000 }, perToken: { max: 100_000 } },
      }),
    )
    const ports = { A: await freePort(), B: await freePort() }
    const env = (name: 'A' | 'B') => ({
      DATABASE_URL: databaseUrl,
      REDIS_URL: (redis as RedisSentinelSetup).url,
      TOKENGATE_CONFIG: config,
      TOKENGATE_DATA_DIR: tempDir(`tg-chaos-${name}-`),
      TOKENGATE_LOG_LEVEL: 'warn',
      ...(name === 'B' ? { TOKENGATE_WORKERS: '2' } : {}),
    })
    const envs = { A: env('A'), B: env('B') }
    const serve = async (name: 'A' | 'B') => {
      const served = await spawnServe({
        env: envs[name],
        args: ['--http', '--listen', `127.0.0.1:${ports[name]}`],
      })
      instances.push(served)
      return served
    }
    const a = await serve('A')
    let b = await serve('B')

    const start = performance.now()
    const record = timeline()
    const { happenings, revocations, happened } = record
    const revoke = async (ids: readonly string[], how: string, run: () => Promise<unknown>) => {
      const issued = performance.now()
      await run()
      const committedAt = record.revoked(ids, how)
      happened(
        `revoke ${ids.length} keys (${how})`,
        `committed in ${(committedAt - issued).toFixed(0)} ms`,
        committedAt,
      )
    }
    const viaApi = (url: string, ids: readonly string[]) => async () => {
      for (const id of ids) await revokeViaApi(url, id, admin.token)
    }

    const load = startLoad({
      instances: { A: a.url, B: `http://127.0.0.1:${ports.B}` },
      credentials,
      rate: RATE,
      timeoutMs: 10_000,
      requestIdPrefix: 'chaos-',
    })
    let postgresDown = POSTGRES_NEVER_DOWN
    let spoolRecovered = 0
    let spoolRecoveryFailures = 0
    try {
      await sleep(3000)
      await revoke(at(batches, 0), "A's API", viaApi(a.url, at(batches, 0)))

      await sleep(2000)
      // A burst of 401s just before the kill: their audit events are certainly not flushed.
      const invalid = credentials.filter((c) => c.kind === 'invalid')
      await load.burst(
        'B',
        Array.from({ length: 100 }, (_, i) => at(invalid, i % invalid.length)),
      )
      const killed = killAll(b)
      await once(b.child, 'exit')
      happened(
        'SIGKILL instance B',
        `primary and both workers (${killed.length} processes), right after 100 401s`,
      )
      await sleep(1500)
      b = await serve('B')
      happened('instance B started again', 'same data directory')
      spoolRecovered = recoveredFromSpool(b.stderr())
      spoolRecoveryFailures = b
        .stderr()
        .split('\n')
        .filter((line) => line.includes('audit spool of a killed process not recovered')).length

      await sleep(1000)
      await revoke(at(batches, 1), 'CLI pat revoke', async () => {
        for (const id of at(batches, 1)) {
          const run = await cli(databaseUrl, 'pat', 'revoke', id)
          assert.equal(run.code, 0, run.stderr)
        }
      })

      await sleep(2000)
      const sql = new pg.Client({ connectionString: databaseUrl })
      await sql.connect()
      const { rows } = await sql.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'tokengate-listen'",
      )
      happened('LISTEN connections terminated', `${rows.length} (pg_terminate_backend)`)
      await revoke(at(batches, 2), 'plain SQL', () =>
        sql.query('UPDATE pats SET revoked_at = $1 WHERE id = ANY($2)', [
          Date.now(),
          at(batches, 2),
        ]),
      )
      await sql.end()

      await sleep(2000)
      const sentinel = redis as RedisSentinelSetup
      await sentinel.master.kill()
      const killedAt = performance.now()
      happened('SIGKILL Redis master', 'Sentinel (down-after 500 ms) promotes the replica')
      await revoke(at(batches, 3), "B's API", viaApi(b.url, at(batches, 3)))
      await until(() => masterPort(sentinel) === sentinel.replica.port, 'replica promoted')
      happened(
        'Redis replica promoted',
        `${((performance.now() - killedAt) / 1000).toFixed(1)} s after the kill`,
      )

      await sleep(2000)
      postgresDown = await stopPostgresFor(postgres, record, 'clients disconnected')
      await revoke(at(batches, 4), "A's API, Postgres just back", viaApi(a.url, at(batches, 4)))
      await sleep(3000)
    } finally {
      await load.stop()
    }
    happened('load stopped', `${load.sent.length} requests at ${RATE}/s`)

    // Every revoked key, on every instance and (fresh connections, handed out in turn) every
    // worker: refused.
    let acceptedAtEnd = 0
    const swept = { ok: 0, unauthorized: 0 }
    for (const url of [a.url, b.url]) {
      for (const credential of credentials) {
        const revoked =
          credential.kind === 'revoked' || revocations.some((r) => r.id === credential.id)
        for (let i = 0; i < (revoked ? 4 : 1); i++) {
          const status = await statusOnFreshConnection(`${url}/api/v1/me`, credential.token)
          if (status === 200) swept.ok++
          if (status === 401) swept.unauthorized++
          if (revoked && status === 200) acceptedAtEnd++
          if (credential.kind === 'valid') assert.equal(status, 200, 'a valid key after the run')
        }
      }
    }

    // Graceful stops flush what is queued; then the audit log is complete.
    await a.stop()
    await b.stop()
    const spoolLeftAtEnd =
      spooledEvents(envs.A.TOKENGATE_DATA_DIR) + spooledEvents(envs.B.TOKENGATE_DATA_DIR)
    const sql = new pg.Client({ connectionString: databaseUrl })
    await sql.connect()
    const audited = await sql.query<{ request_id: string }>(
      "SELECT request_id FROM audit_events WHERE type = 'auth.failed'",
    )
    const dropped = await sql.query<{ n: string }>(
      "SELECT COALESCE(sum((details->>'count')::int), 0) AS n FROM audit_events WHERE type = 'audit.dropped'",
    )
    // Usage counts (what customers are billed on), both instances, B's kill included.
    const usage = await sql.query<{ allowed: string; unauthorized: string }>(
      "SELECT coalesce(sum(allowed), 0) AS allowed, coalesce(sum(unauthorized), 0) AS unauthorized FROM usage_counts WHERE scope = 'all' AND resolution = 'minute'",
    )
    await sql.end()

    const facts: RunFacts = {
      sent: load.sent,
      happenings,
      revocations,
      postgresDown,
      recoveryGraceMs: RECOVERY_GRACE_MS,
      revocationBoundMs: REVOCATION_BOUND_MS,
      auditedRequestIds: new Set(audited.rows.map((r) => r.request_id)),
      auditDropped: Number(dropped.rows[0]?.n ?? 0),
      spoolRecovered,
      spoolRecoveryFailures,
      spoolLeftAtEnd,
      unsent401: swept.unauthorized,
      acceptedAtEnd,
      start,
    }
    const result = survival(facts)
    const clientOk = (result.total.statuses['200'] ?? 0) + swept.ok
    const client401 = (result.total.statuses['401'] ?? 0) + swept.unauthorized
    const cut = result.total.sent - result.total.answered
    const allowed = Number(usage.rows[0]?.allowed ?? 0)
    const unauthorized = Number(usage.rows[0]?.unauthorized ?? 0)
    const usageRow = `| usage counts equal what the client saw | usage_counts' allowed and 401 at least the client's 200s and 401s (the final sweep's included), at most the ${cut} requests without an answer more | client ${clientOk} 200, ${client401} 401; usage ${allowed} allowed, ${unauthorized} unauthorized |`
    console.log(`\n${survivalTables(facts, result)}\n${usageRow}\n`)

    assert.deepEqual(result.forbidden5xx, {}, 'a 5xx outside the Postgres outage')
    assert.equal(result.acceptedLate, 0, 'a revoked key accepted after the bound')
    assert.equal(result.acceptedRevokedBefore, 0, 'a key revoked before the run was accepted')
    assert.equal(acceptedAtEnd, 0, 'a revoked key accepted at the end')
    assert.ok(result.auditLost <= facts.auditDropped, `${result.auditLost} audit events lost`)
    assert.equal(result.auditLost, 0, 'audit events lost')
    assert.ok(allowed >= clientOk, `allowed requests missing from usage: ${clientOk - allowed}`)
    assert.ok(unauthorized >= client401, `401s missing from usage: ${client401 - unauthorized}`)
    assert.ok(
      allowed - clientOk + unauthorized - client401 <= cut,
      'usage counts more than was answered or cut',
    )
    // The load really ran through every fault: most requests were answered.
    assert.ok(result.total.answered > result.total.sent * 0.8, 'too few requests answered')
  })
})

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = []
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size))
  return out
}

function at<T>(items: readonly T[], index: number): T {
  return items[index] as T
}

/** SIGKILLs the primary and its workers at once (as a container's OOM kill); their pids. */
function killAll(served: ServeProcess): number[] {
  const primary = served.child.pid as number
  const pids = [primary, ...childrenOf(primary)]
  for (const pid of pids) process.kill(pid, 'SIGKILL')
  return pids
}

/** Events the restarted instance's workers stored from the killed ones' spool (their log). */
function recoveredFromSpool(log: string): number {
  let recovered = 0
  for (const line of log.split('\n')) {
    if (!line.includes('recovered from its spool')) continue
    recovered += Number((JSON.parse(line) as { recovered?: number }).recovered ?? 0)
  }
  return recovered
}

/** Events (lines) in the audit spool segments left in a data directory. */
function spooledEvents(dataDir: string): number {
  const dir = join(dataDir, 'audit-spool')
  let lines = 0
  for (const name of existsSync(dir) ? readdirSync(dir) : []) {
    if (!name.includes('.jsonl')) continue
    lines += readFileSync(join(dir, name), 'utf8').split('\n').filter(Boolean).length
  }
  return lines
}

/** `DELETE /api/v1/tokens/{id}`, retried while the instance answers 503 (Postgres just back). */
async function revokeViaApi(url: string, id: string, adminToken: string): Promise<void> {
  const deadline = performance.now() + 10_000
  for (;;) {
    const response = await fetch(`${url}/api/v1/tokens/${id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${adminToken}` },
      signal: AbortSignal.timeout(5000),
    })
    await response.arrayBuffer()
    if (response.status === 200) return
    if (response.status !== 503 || performance.now() > deadline) {
      throw new Error(`revoking ${id} on ${url}: ${response.status}`)
    }
    await sleep(50)
  }
}

function masterPort(sentinel: RedisSentinelSetup): number {
  const out = execFileSync(
    'redis-cli',
    ['-p', String(sentinel.sentinelPort), 'SENTINEL', 'get-master-addr-by-name', sentinel.name],
    { encoding: 'utf8' },
  )
  return Number(out.trim().split('\n')[1])
}

async function until(probe: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = performance.now() + timeoutMs
  while (!probe()) {
    if (performance.now() > deadline) throw new Error(`${what}: not after ${timeoutMs} ms`)
    await sleep(50)
  }
}
