/**
 * Memory and cold lookups with a large store:
 * 1. seeds 1,000,000 PATs into a fresh SQLite store with `insertPats` (batches of 10,000);
 * 2. warms 100,000 of them into the production lookup cache through `authenticate`, and
 *    prints the process RSS (target: under 150 MB; the bench's own list of the 100,000
 *    plaintext tokens it replays is included in that figure);
 * 3. times PAT lookups on a cold cache with 1,000,000 stored tokens against a store of
 *    1,000 (target: within 2x).
 *
 * The warm-up and the RSS reading run in a fresh child process that only opens the seeded
 * file, as a server would at start-up: the seeding process's own allocations (1,000,000
 * records built in JavaScript) would otherwise inflate the figure.
 *
 * Run: `node --expose-gc bench/memory.bench.ts [--pats 1000000] [--warm 100000]`
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createAuthenticator } from '../src/core/authenticate.ts'
import { issuePat } from '../src/core/pat.ts'
import type { JwtVerifier, PatRecord } from '../src/core/ports.ts'
import { createCachedLookups } from '../src/stores/cached-lookups.ts'
import { openSqliteStore, type SqliteStore } from '../src/stores/sqlite.ts'

const args = process.argv.slice(2)
const option = (name: string, fallback: number) => {
  const at = args.indexOf(`--${name}`)
  return at === -1 ? fallback : Number(args[at + 1])
}
const TOTAL = option('pats', 1_000_000)
const WARM = option('warm', 100_000)
const SAMPLE = 1000
const TENANT = 'mem-tenant'
const mb = (bytes: number) => Math.round(bytes / 1024 / 1024)
const gc = (globalThis as { gc?: () => void }).gc

async function seed(store: SqliteStore, count: number, keep: number): Promise<string[]> {
  await store.migrate()
  await store.createTenant({ id: TENANT, name: 'Memory' }, Date.now())
  const kept: string[] = []
  const now = Date.now()
  for (let done = 0; done < count; ) {
    const batch: PatRecord[] = []
    for (let i = 0; i < 10_000 && done < count; i++, done++) {
      const issued = issuePat({
        tenantId: TENANT,
        subject: `user-${done}`,
        name: 'bench',
        permissions: ['tokens:read'],
        expiresAt: now + 86_400_000,
        now,
      })
      if (kept.length < keep) kept.push(issued.token)
      batch.push(issued.record)
    }
    await store.insertPats(batch)
  }
  return kept
}

const noJwt: JwtVerifier = {
  verify: async () => ({
    ok: false,
    failure: { code: 'invalid_token', reason: 'malformed', detail: '' },
  }),
  close() {},
}

/** Mean µs of `findPatByHash` through a cold production cache, over `tokens`. */
async function coldLookupUs(store: SqliteStore, tokens: readonly string[]): Promise<number> {
  const lookups = createCachedLookups(store, { maxEntries: 100_000 })
  const authenticate = createAuthenticator({
    lookups,
    jwt: noJwt,
    clock: { now: () => Date.now() },
  })
  const started = performance.now()
  for (const token of tokens) {
    const result = await authenticate({ authorization: [`Bearer ${token}`], tenantIds: [] })
    if (!result.ok) throw new Error(`lookup failed: ${JSON.stringify(result.failure)}`)
  }
  return ((performance.now() - started) * 1000) / tokens.length
}

async function warmPhase(dbPath: string, tokenFile: string): Promise<void> {
  const store = openSqliteStore(dbPath)
  const tokens = readFileSync(tokenFile, 'utf8').split('\n').filter(Boolean)
  const rssBefore = process.memoryUsage().rss
  const started = performance.now()
  const lookups = createCachedLookups(store, { maxEntries: 100_000 })
  const authenticate = createAuthenticator({
    lookups,
    jwt: noJwt,
    clock: { now: () => Date.now() },
  })
  for (const token of tokens) {
    const result = await authenticate({ authorization: [`Bearer ${token}`], tenantIds: [] })
    if (!result.ok) throw new Error('warm-up failed')
  }
  tokens.length = 0
  gc?.()
  const usage = process.memoryUsage()
  const status = readFileSync('/proc/self/status', 'utf8')
  const field = (name: string) =>
    /:\s+(\d+)/.exec(status.split('\n').find((l) => l.startsWith(name)) ?? '')?.[1]
  console.log(
    `RssAnon ${Math.round(Number(field('RssAnon')) / 1024)} MB, RssFile ${Math.round(Number(field('RssFile')) / 1024)} MB, before warm-up RSS ${mb(rssBefore)} MB`,
  )
  console.log(
    `warmed ${lookups.stats().size - 1} PATs into the cache in ${Math.round(performance.now() - started)} ms (fresh process, store opened, not seeded, in it)`,
  )
  console.log(
    `RSS ${mb(usage.rss)} MB (heap used ${mb(usage.heapUsed)} MB, external ${mb(usage.external)} MB) with ${TOTAL} PATs stored and ${WARM} cached (target < 150 MB)${gc ? '' : ' [run with --expose-gc for a settled figure]'}`,
  )
  await store.close()
}

const phase = args.indexOf('--warm-phase')
if (phase !== -1) {
  await warmPhase(args[phase + 1] as string, args[phase + 2] as string)
  process.exit(0)
}

const dir = mkdtempSync(join(tmpdir(), 'tg-mem-'))
try {
  const started = performance.now()
  const big = openSqliteStore(join(dir, 'big.db'))
  const tokens = await seed(big, TOTAL, Math.max(WARM, SAMPLE * 2))
  console.log(
    `seeded ${TOTAL} PATs with insertPats in ${Math.round(performance.now() - started)} ms`,
  )

  // Cold lookups first (nothing cached yet), on tokens spread over the first inserts.
  const sample = tokens.slice(Math.max(WARM - SAMPLE, 0), Math.max(WARM, SAMPLE))
  const small = openSqliteStore(join(dir, 'small.db'))
  const smallTokens = await seed(small, SAMPLE, SAMPLE)
  for (let round = 0; round < 2; round++) {
    // Round 0 warms the statement caches on both stores; round 1 is reported.
    const bigUs = await coldLookupUs(big, round === 0 ? tokens.slice(0, 200) : sample)
    const smallUs = await coldLookupUs(small, round === 0 ? smallTokens.slice(0, 200) : smallTokens)
    if (round === 1) {
      console.log(
        `cold PAT authenticate: ${bigUs.toFixed(1)} µs with ${TOTAL} stored, ${smallUs.toFixed(1)} µs with ${SAMPLE} stored (ratio ${(bigUs / smallUs).toFixed(2)}, target ≤ 2)`,
      )
    }
  }
  await small.close()

  await big.close()
  const tokenFile = join(dir, 'warm.txt')
  writeFileSync(tokenFile, `${tokens.slice(0, WARM).join('\n')}\n`)
  tokens.length = 0
  const output = execFileSync(
    process.execPath,
    [
      '--expose-gc',
      process.argv[1] as string,
      '--pats',
      String(TOTAL),
      '--warm',
      String(WARM),
      '--warm-phase',
      join(dir, 'big.db'),
      tokenFile,
    ],
    { encoding: 'utf8' },
  )
  process.stdout.write(output)
} finally {
  rmSync(dir, { recursive: true, force: true })
}
