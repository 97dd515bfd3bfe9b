/**
 * The chaos suite, part two (issue #32): what users lose on an instance's own disk. One real
 * `tokengate serve` on SQLite, its data directory on a small tmpfs, every fsync 50 ms slower
 * for the whole run (the latency bench's LD_PRELOAD shim), under a paced load of valid,
 * refused and quota-limited keys, while the suite
 *
 *  1. disables keys (CLI `pat disable`) and a tenant (CLI `tenant disable`: its keys and its
 *     JWTs, from an identity provider added with `issuer add --jwks-file`),
 *  2. fills the file system up (a full disk), revokes keys with the CLI on it, frees it,
 *  3. SIGKILLs the instance and starts it again on the same data directory.
 *
 * It prints what survived (docs/scale-out.md, "Chaos") and asserts:
 * - no 5xx at all (a slow or full disk is no reason for one; quotas never wait 1 s);
 * - no disabled or revoked key accepted more than 1 s after the command returned, and none at
 *   the end; the tenant's keys too;
 * - `/readyz` degraded within 2 s of the full disk, ready again once it has room;
 * - every 401 answered has its audit event, and usage counts equal what the client saw (at
 *   most the requests cut by the kill more);
 * - a quota of 40 uses served at most 40 times, a quota of 300 at most 300 + 3 (its credit).
 *
 * Needs root (the tmpfs) and cc (the shim); CI has both.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { commandExists } from '../../bench/load.ts'
import { buildSlowFsync } from '../../bench/slow-fsync.ts'
import { issuePat } from '../../src/core/pat.ts'
import type { PatRecord } from '../../src/core/ports.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { fillFileSystem, readyz, tokengateCli } from '../helpers/full-disk.ts'
import { createTestIssuer } from '../helpers/jwt.ts'
import { type ServeProcess, spawnServe, statusOnFreshConnection } from '../helpers/serve-process.ts'
import { type Credential, startLoad } from './load.ts'
import { POSTGRES_NEVER_DOWN, survival, survivalTables, timeline } from './report.ts'

const BOUND_MS = 1000
const RATE = 100

function cannotRun(): string | false {
  const missing =
    process.getuid?.() !== 0 ? 'not root (a tmpfs is mounted)' : !commandExists('cc') && 'no cc'
  if (!missing) return false
  if (process.env.CI === 'true') throw new Error(`CI=true but ${missing}`)
  return missing
}

describe('chaos: one SQLite instance, a slow disk, a full disk and kill -9 under load', {
  skip: cannotRun(),
}, () => {
  const cleanups: (() => unknown)[] = []
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup()
  })

  it('loses no usage, audit event or revocation; quotas hold; no 5xx', async () => {
    const mount = mkdtempSync(join(tmpdir(), 'tg-chaos-disk-'))
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=48m', 'tmpfs', mount])
    cleanups.push(() => {
      execFileSync('umount', ['-l', mount])
      rmSync(mount, { recursive: true, force: true })
    })
    const shim = buildSlowFsync()
    cleanups.push(() => shim.cleanup())
    const dataDir = join(mount, 'data')

    // The store, seeded before the start: two tenants, keys, two keys with a quota.
    const store = openSqliteStore(
      (() => {
        execFileSync('mkdir', ['-p', dataDir])
        return join(dataDir, 'tokengate.db')
      })(),
    )
    await store.migrate()
    const now = Date.now()
    await store.createTenant({ id: 'chaos', name: 'Chaos' }, now)
    await store.createTenant({ id: 'doomed', name: 'Doomed' }, now)
    const records: PatRecord[] = []
    const credentials: Credential[] = []
    const key = (tenantId: string, kind: Credential['kind'], quota?: number) => {
      const { token, record } = issuePat({
        tenantId,
        subject: 'chaos',
        name: 'chaos',
        permissions: [],
        expiresAt: null,
        now,
      })
      records.push(
        quota ? { ...record, quota: { limit: quota, refill: 'none', counter: record.id } } : record,
      )
      const credential = { kind, token, id: record.id }
      credentials.push(credential)
      return credential
    }
    for (let i = 0; i < 15; i++) key('chaos', 'valid')
    const toDisable = Array.from({ length: 5 }, () => key('chaos', 'revoking'))
    const ofTenant = Array.from({ length: 5 }, () => key('doomed', 'revoking'))
    const toRevoke = Array.from({ length: 5 }, () => key('chaos', 'revoking'))
    const quota40 = key('chaos', 'valid', 40)
    const quota300 = key('chaos', 'valid', 300)
    for (let i = 0; i < 5; i++) {
      credentials.push({ kind: 'invalid', token: `pat_${i}${'x'.repeat(10)}notvalid` })
    }
    await store.insertPats(records)
    await store.close()
    // JWTs of an identity provider (keys given as a file): one per tenant; the disabled
    // tenant's is refused like its keys.
    const idp = createTestIssuer({ issuer: 'https://idp.chaos.test', kid: 'chaos-1' })
    const jwks = join(mount, 'jwks.json')
    writeFileSync(jwks, JSON.stringify({ keys: [idp.publicJwk] }))
    const added = await tokengateCli(
      dataDir,
      ...['issuer', 'add', '--issuer', 'https://idp.chaos.test', '--audience', 'tokengate'],
      ...['--jwks-file', jwks],
    )
    assert.equal(added.code, 0, added.stderr)
    const jwt = (tenant: string) =>
      idp.sign({ tenant_id: tenant, permissions: [] }, { expiresInSec: 3600 })
    const chaosJwt: Credential = {
      kind: 'valid',
      token: await jwt('chaos'),
      id: 'jwt-chaos',
      tenant: 'chaos',
    }
    credentials.push(chaosJwt)
    const doomedJwt: Credential = {
      kind: 'revoking',
      token: await jwt('doomed'),
      id: 'jwt-doomed',
      tenant: 'doomed',
    }
    credentials.push(doomedJwt)

    const config = join(mount, 'config.json')
    writeFileSync(config, JSON.stringify({ rateLimit: { enabled: false } }))
    const env = {
      ...shim.env(50, 'chaos'),
      TOKENGATE_CONFIG: config,
      TOKENGATE_DATA_DIR: dataDir,
      TOKENGATE_WORKERS: '1',
      TOKENGATE_LOG_LEVEL: 'warn',
    }
    const port = await freePortOf()
    const serve = async () => {
      const served = await spawnServe({ env, args: ['--http', '--listen', `127.0.0.1:${port}`] })
      cleanups.push(() => served.stop())
      return served
    }
    let server: ServeProcess = await serve()
    const url = server.url

    const start = performance.now()
    const record = timeline()
    const { happenings, revocations, happened } = record
    const change = async (ids: readonly string[], how: string, args: string[][]) => {
      const issued = performance.now()
      for (const argv of args) {
        const run = await tokengateCli(dataDir, ...argv)
        assert.equal(run.code, 0, `${argv.join(' ')}: ${run.stderr}`)
      }
      const committedAt = record.revoked(ids, how)
      happened(how, `${ids.length} keys, committed in ${(committedAt - issued).toFixed(0)} ms`)
    }

    const load = startLoad({
      instances: { A: url },
      credentials,
      rate: RATE,
      timeoutMs: 10_000,
      requestIdPrefix: 'chaos-disk-',
    })
    cleanups.push(() => load.stop())
    let degradedAfterMs = Number.NaN
    const diskFull = { from: Number.POSITIVE_INFINITY, to: Number.NEGATIVE_INFINITY }
    try {
      await sleep(2000)
      await change(
        toDisable.map((c) => c.id as string),
        'CLI pat disable',
        toDisable.map((c) => ['pat', 'disable', c.id as string]),
      )
      await sleep(1000)
      await change(
        [...ofTenant, doomedJwt].map((c) => c.id as string),
        'CLI tenant disable (its 5 keys and a JWT)',
        [['tenant', 'disable', 'doomed']],
      )

      await sleep(1000)
      const filler = join(mount, 'filler')
      fillFileSystem(filler)
      const filledAt = performance.now()
      diskFull.from = filledAt
      happened('disk full', 'the tmpfs filled up')
      while (performance.now() - filledAt < 5000) {
        const ready = await readyz(url)
        if (ready.status === 'degraded' && ready.checks.storeWrites === 'failing') {
          degradedAfterMs = performance.now() - filledAt
          break
        }
        await sleep(100)
      }
      happened('/readyz degraded', `${degradedAfterMs.toFixed(0)} ms after the disk filled up`)
      await change(
        toRevoke.map((c) => c.id as string),
        'CLI pat revoke on the full disk',
        toRevoke.map((c) => ['pat', 'revoke', c.id as string]),
      )
      await sleep(2000)
      rmSync(filler)
      happened('disk has room again', 'the filler removed')
      const freedAt = performance.now()
      diskFull.to = freedAt
      while ((await readyz(url)).status !== 'ready') {
        if (performance.now() - freedAt > 15_000) throw new Error('not ready 15 s after space')
        await sleep(100)
      }
      happened('/readyz ready', `${(performance.now() - freedAt).toFixed(0)} ms after`)

      await sleep(1500)
      server.child.kill('SIGKILL')
      await once(server.child, 'exit')
      happened('SIGKILL the instance', 'with what it had not written yet')
      server = await serve()
      happened('instance started again', 'same data directory')
      await sleep(3000)
    } finally {
      await load.stop()
    }
    happened('load stopped', `${load.sent.length} requests at ${RATE}/s`)

    let acceptedAtEnd = 0
    for (const credential of credentials) {
      if (credential.kind !== 'revoking') continue
      if (credential.tenant) continue
      const status = await statusOnFreshConnection(`${url}/api/v1/me`, credential.token)
      if (status === 200) acceptedAtEnd++
    }
    await server.stop()
    const spoolLines = server
      .stderr()
      .split('\n')
      .filter((l) => /spool|journal/.test(l))
    const spoolRecovered = spoolLines.reduce(
      (sum, line) => sum + Number((JSON.parse(line) as { recovered?: number }).recovered ?? 0),
      0,
    )
    for (const line of spoolLines) console.log(`restart: ${line}`)

    const db = new DatabaseSync(join(dataDir, 'tokengate.db'), { readOnly: true })
    const audited = db
      .prepare("SELECT request_id FROM audit_events WHERE type = 'auth.failed'")
      .all() as { request_id: string }[]
    const dropped = db
      .prepare(
        "SELECT coalesce(sum(json_extract(details, '$.count')), 0) AS n FROM audit_events WHERE type = 'audit.dropped'",
      )
      .get() as { n: number }
    const usage = db
      .prepare(
        "SELECT coalesce(sum(allowed), 0) AS allowed, coalesce(sum(unauthorized), 0) AS unauthorized, coalesce(sum(limited), 0) AS limited FROM usage_counts WHERE scope = 'all' AND resolution = 'minute'",
      )
      .get() as { allowed: number; unauthorized: number; limited: number }
    const quotaUsed = new Map(
      (
        db.prepare('SELECT counter, used FROM quota_usage').all() as {
          counter: string
          used: number
        }[]
      ).map((r) => [r.counter, Number(r.used)]),
    )
    db.close()

    const facts = {
      sent: load.sent,
      happenings,
      revocations,
      postgresDown: POSTGRES_NEVER_DOWN,
      recoveryGraceMs: 0,
      revocationBoundMs: BOUND_MS,
      auditedRequestIds: new Set(audited.map((r) => r.request_id)),
      auditDropped: Number(dropped.n),
      spoolRecovered,
      acceptedAtEnd,
      start,
    }
    const result = survival(facts)
    const answered = (status: number) => load.sent.filter((s) => s.status === status).length
    const servedTo = (c: Credential) =>
      load.sent.filter((s) => s.credential === c && s.status === 200).length
    const cut = load.sent.filter((s) => s.status === 0).length
    const ok = answered(200)
    const refused = answered(401)
    const limited = answered(429)
    // docs/limits.md: a quota under 100 uses has no credit; its next block cannot be written
    // on a full disk, so its requests get 503 `unavailable` (fail closed) until there is room.
    const allowed503 = (s: (typeof load.sent)[number]) =>
      s.status === 503 &&
      s.code === 'unavailable' &&
      s.credential === quota40 &&
      s.answeredAt >= diskFull.from &&
      s.sentAt <= diskFull.to + BOUND_MS
    const quota503 = load.sent.filter(allowed503).length
    const forbidden5xx = load.sent.filter((s) => s.status >= 500 && !allowed503(s))
    const lines = [
      survivalTables(facts, result).replace(
        /\| 5xx only while Postgres is down \|[^\n]*/,
        `| 5xx only for a quota under 100 uses while the disk is full | 503 \`unavailable\` for the quota-40 key from the fill until 1 s after space returns (no credit, its block cannot be written) | ${quota503} such 503s; other 5xx: **${forbidden5xx.length}** |`,
      ),
      `| usage counts equal what the client saw | allowed, 401 and 429 counts in usage_counts; at most the ${cut} requests cut by the kill more | client ${ok} 200, ${refused} 401, ${limited} 429; usage ${usage.allowed} allowed, ${usage.unauthorized} unauthorized, ${usage.limited} limited |`,
      `| quotas hold through every fault | a quota of 40 serves at most 40; of 300 at most 300 + 3 (credit) | served ${servedTo(quota40)} of 40 (store: ${quotaUsed.get(quota40.id as string)}), ${servedTo(quota300)} of 300 (store: ${quotaUsed.get(quota300.id as string)}) |`,
      `| a full disk is seen | /readyz degraded within 2 s | ${degradedAfterMs.toFixed(0)} ms |`,
    ]
    console.log(`\n${lines.join('\n')}\n`)
    const at = (s: { sentAt: number }) => ((s.sentAt - start) / 1000).toFixed(2)
    for (const s of forbidden5xx) console.log(`5xx: ${s.status} ${s.code} sent at ${at(s)} s`)
    for (const s of load.sent) {
      if (s.status === 401 && !facts.auditedRequestIds.has(s.requestId)) {
        console.log(`audit event missing: ${s.requestId} sent at ${at(s)} s`)
      }
    }

    assert.equal(forbidden5xx.length, 0, "a 5xx other than the full disk's quota 503s")
    assert.equal(result.acceptedLate, 0, 'a disabled or revoked key accepted after the bound')
    assert.equal(acceptedAtEnd, 0, 'a disabled or revoked key accepted at the end')
    assert.ok(degradedAfterMs <= 2000, '/readyz degraded within 2 s of the full disk')
    assert.equal(result.auditLost, 0, 'audit events lost')
    assert.ok(Number(usage.allowed) >= ok, `allowed requests lost: ${ok - Number(usage.allowed)}`)
    assert.ok(Number(usage.unauthorized) >= refused, 'unauthorized requests lost from usage')
    assert.ok(Number(usage.limited) >= limited, 'quota refusals lost from usage')
    const extra =
      Number(usage.allowed) - ok + Number(usage.unauthorized) - refused + Number(usage.limited)
    assert.ok(extra - limited <= cut, `counted twice: ${extra - limited} more than answered or cut`)
    assert.ok(servedTo(quota40) <= 40, 'a quota of 40 exceeded')
    // The JWTs were served: the valid one throughout, the disabled tenant's until then.
    const jwtAnswers = (c: Credential) => load.sent.filter((s) => s.credential === c)
    assert.ok(
      jwtAnswers(chaosJwt).every((s) => s.status === 200 || s.status === 0),
      'a valid JWT refused',
    )
    assert.ok(servedTo(chaosJwt) > 0 && servedTo(doomedJwt) > 0, 'the JWTs were served')
    assert.ok(servedTo(quota300) <= 303, 'a quota of 300 exceeded beyond its credit')
    assert.ok(result.total.answered > result.total.sent * 0.8, 'too few requests answered')
  })
})

async function freePortOf(): Promise<number> {
  const { freePort } = await import('../helpers/services.ts')
  return freePort()
}
