/**
 * Memory and cold lookups with a large store:
 * 1. seeds 1,000,000 PATs into a fresh SQLite store with `insertPats` (batches of 10,000);
 * 2. times PAT lookups on a cold cache with 1,000,000 stored tokens against a store of
 *    1,000 (target: within 2x);
 * 3. in-process: warms 100,000 of them into the production lookup cache through
 *    `authenticate` and prints the process RSS (the bench's own list of the 100,000
 *    plaintext tokens it replays is still held when RSS is read, so it is in that figure);
 * 4. served: `tokengate serve` as installed from the package, the 100,000 PATs requested
 *    twice each over HTTP, RSS of the server process (`servePhase`). This is the figure
 *    issue #15's target (< 150 MB) is about.
 *
 * The in-process warm-ups run in a fresh child process that only opens the seeded file, as
 * a server would at start-up: the seeding process's own allocations (1,000,000 records built
 * in JavaScript) would otherwise inflate the figure. The child runs the TypeScript sources
 * with Node's compile cache on (`NODE_COMPILE_CACHE`), three times:
 * - cache empty, production flags: a first start from the sources, which loads the
 *   TypeScript stripper (a WebAssembly module, ~30 MB RSS) for the rest of its life;
 * - cache filled, Node's default flags: shows what the flags below are worth;
 * - cache filled, production flags.
 * Each prints where the memory is: RSS split into anonymous and file-backed (mapped code:
 * mostly the node binary), the V8 heap (its young generation separately) and malloc.
 *
 * Run: `node --expose-gc bench/memory.bench.ts [--pats 1000000] [--warm 100000]
 * [--node-flags '--max-semi-space-size=8'] [--serve-only] [--data-dir DIR] [--heap-stats]
 * [--heap-sampling] [--heap-snapshot] [--store sqlite|postgres] [--runs N] [--env NAME=VALUE]...`
 * (`--store postgres`: the served phase only, on a throwaway Postgres + Redis on 127.0.0.1 as
 * the postgres-redis Kubernetes overlay deploys it, the seed's PATs copied in; `postgresBackend`;
 * `--runs N`: N measured served starts after the one hits check, each on a fresh store;
 * `--env`: set in the served process's environment,
 * e.g. MALLOC_ARENA_MAX=2; `--node-flags` replaces the production flags in the in-process phases
 * and is added to the bin's own in the served one (then started as `node <the bin's flags>
 * <these> bin/tokengate.js`), to try others; `--serve-only` skips the in-process starts;
 * `--heap-stats`: the served process runs with its inspector on a free port and, when its RSS
 * is read and again 10 s later, each thread's V8 heap by space (the main thread's and the
 * SQLite writer's, committed and used, no GC forced), external memory and V8 malloc, and the
 * process's anonymous mappings by kind (malloc heaps, the rest; /proc/<pid>/smaps) are
 * printed, and once more before the load, half-way through the second pass and every 10 s of
 * the first (during the load); every served run prints each pass's highest RSS and when;
 * `--heap-sampling` (with `--heap-stats`): a sampling heap profile of the main thread over the
 * second pass, objects collected by a major GC included (promoted, then garbage), by allocating
 * function; every served run prints its RSS every 500 ms from the end of the load to the
 * second reading, and the highest of them; `--heap-snapshot`: after the RSS is read, the served process writes a heap
 * snapshot into the data directory (`--heapsnapshot-signal`) and its summary by class and by
 * holder is printed (bench/heap-summary.ts); `--data-dir` keeps
 * the seeded store in DIR and, when DIR already holds one, reuses it and skips the seeding
 * and the cold lookups: seeding 1,000,000 PATs takes ~2 minutes).
 */
import { execFileSync, spawn } from 'node:child_process'
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { getHeapSpaceStatistics } from 'node:v8'
import { createAuthenticator } from '../src/core/authenticate.ts'
import { issuePat } from '../src/core/pat.ts'
import type { JwtVerifier, PatRecord } from '../src/core/ports.ts'
import { createCachedLookups } from '../src/stores/cached-lookups.ts'
import { openSqliteStore, type SqliteStore } from '../src/stores/sqlite.ts'
import { exitWithUsage, readCli } from './cli.ts'
import { printHeapSummary } from './heap-summary.ts'
import { median } from './latency-stats.ts'

const cli = {
  script: 'bench/memory.bench.ts',
  options: {
    pats: { type: 'number', integer: true, default: 1_000_000 },
    warm: { type: 'number', integer: true, default: 100_000 },
    'node-flags': { type: 'flags', default: '' },
    'serve-only': { type: 'boolean' },
    'data-dir': { type: 'string', value: 'DIR' },
    'heap-stats': { type: 'boolean' },
    'heap-sampling': { type: 'boolean' },
    'heap-snapshot': { type: 'boolean' },
    store: { type: 'choice', choices: ['sqlite', 'postgres'], default: 'sqlite' },
    runs: { type: 'number', integer: true, default: 1 },
    env: { type: 'strings', value: 'NAME=VALUE' },
    // One in-process start, in a child process of this script (the phases below).
    'warm-phase': { type: 'string', value: 'DB' },
    'warm-tokens': { type: 'string', value: 'FILE' },
    'warm-label': { type: 'string', value: 'TEXT' },
  },
  internal: ['warm-phase', 'warm-tokens', 'warm-label'],
} as const
const { values } = readCli(cli)
const TOTAL = values.pats
const ONLY_SERVE = values['serve-only']
const WARM = values.warm
/** `--runs N`: measured served starts, each on a fresh copy of the store (the hits check once). */
const RUNS = values.runs
/** `--store postgres`: serve on Postgres + Redis (`postgresBackend`); SQLite by default. */
const STORE = values.store
const SAMPLE = 1000
const TENANT = 'mem-tenant'
const mb = (bytes: number) => Math.round(bytes / 1024 / 1024)
const gc = (globalThis as { gc?: () => void }).gc

/**
 * The Node flags a production server runs with: those on the `#!` line of bin/tokengate.js
 * (docs/scale-out.md, "Memory per instance"), read from it so that the in-process phases
 * match the bin. `--node-flags` replaces them in the in-process phases and is added to them
 * in the served one, to try others (not as NODE_OPTIONS: it refuses most V8 flags).
 */
const SHEBANG_FLAGS = (
  /node((?: --[\w-]+(?:=\S+)?)*)\s*$/.exec(
    readFileSync(new URL('../bin/tokengate.js', import.meta.url), 'utf8').split('\n')[0] ?? '',
  )?.[1] ?? ''
).trim()
const EXTRA_NODE_FLAGS = values['node-flags']
const HEAP_SNAPSHOT = values['heap-snapshot']
const HEAP_STATS = values['heap-stats']
/** With `--heap-stats`: a sampling heap profile of the main thread over the second pass. */
const HEAP_SAMPLING = HEAP_STATS && values['heap-sampling']
/** `--env NAME=VALUE` (repeatable): set in the served process's environment, to try one. */
const EXTRA_ENV = Object.fromEntries(
  values.env.map((setting) => {
    const equals = setting.indexOf('=')
    if (equals < 1) exitWithUsage(cli, `--env takes NAME=VALUE, not '${setting}'`)
    return [setting.slice(0, equals), setting.slice(equals + 1)]
  }),
)
const PRODUCTION_NODE_FLAGS = (EXTRA_NODE_FLAGS || SHEBANG_FLAGS).split(' ').filter(Boolean)

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

async function warmPhase(dbPath: string, tokenFile: string, label: string): Promise<void> {
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
  const warmMs = performance.now() - started
  gc?.()
  const usage = process.memoryUsage()
  const smaps = readFileSync('/proc/self/smaps_rollup', 'utf8')
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(smaps)?.[1])
  const anonymous = kb('Anonymous') * 1024
  const space = (name: string) => getHeapSpaceStatistics().find((s) => s.space_name === name)
  const young = space('new_space')?.physical_space_size ?? 0
  const old = space('old_space')
  console.log(`${label}:`)
  console.log(
    `  RSS ${mb(usage.rss)} MB with ${TOTAL} PATs stored, ${lookups.stats().size - 1} cached and the ${tokens.length} plaintext tokens held (target < 150 MB)${gc ? '' : ' [run with --expose-gc for a settled figure]'}`,
  )
  console.log(
    `  anonymous ${mb(anonymous)} MB, file-backed ${mb(usage.rss - anonymous)} MB; V8 heap ${mb(usage.heapTotal)} MB (young generation ${mb(young)}, old space ${mb(old?.space_used_size ?? 0)} used of ${mb(old?.physical_space_size ?? 0)}, all used ${mb(usage.heapUsed)}), external ${mb(usage.external)} MB; RSS ${mb(rssBefore)} MB before the warm-up, which took ${Math.round(warmMs)} ms`,
  )
  await store.close()
}

/**
 * The figure the target is about, as operators see it: `tokengate serve` installed from the
 * package (the built JavaScript in dist/, the bin started through its own `#!` line and so
 * with its own Node flags; `installedLayout` below), with default settings except two, on
 * the seeded file:
 * - the per-tenant quota, raised so that 100,000 requests of one tenant are not answered
 *   429 (the limiter still counts every request);
 * - the lookup cache TTL, raised from 2 s to 1 h so that the 100,000 cached PATs are still
 *   fresh when they are requested again (with 2 s they would be held, expired, and fetched
 *   again: the same memory, but not "cached" in any useful sense).
 * The 100,000 PATs are requested once each over HTTP (all cache misses), then once more (all
 * hits), then the server's own RSS is read from /proc. It includes Fastify, the rate
 * limiter's per-token counters, the pending last-used times and the audit writer, and not
 * the bench's list of plaintext tokens.
 *
 * A second start, the same in every way but with `metrics.enabled`, checks the "cached"
 * claim: its /metrics must show no lookup cache miss during the second pass.
 */
async function servePhase(
  dataDir: string,
  tokenFile: string,
  bin: string,
  compileCache: string,
  backend: Backend,
) {
  const tokens = readFileSync(tokenFile, 'utf8').split('\n').filter(Boolean)
  const checked = await startAndReplay(
    dataDir,
    tokens,
    bin,
    compileCache,
    true,
    await backend.fresh(),
  )
  console.log(
    `  hits check (metrics on): the second pass made ${checked.replayMisses} cache misses and ${checked.replayHits} hits (PAT and tenant lookups); cache entries ${checked.entries}`,
  )
  if (checked.replayMisses !== 0) throw new Error('the second pass was not served from the cache')
  const mb1 = (bytes: number) => (bytes / 1024 / 1024).toFixed(1)
  for (let run = 1; run <= RUNS; run++) {
    const measured = await startAndReplay(
      dataDir,
      tokens,
      bin,
      compileCache,
      false,
      await backend.fresh(),
    )
    const started = EXTRA_NODE_FLAGS
      ? `node ${SHEBANG_FLAGS} ${EXTRA_NODE_FLAGS} bin/tokengate.js`
      : `started by the bin's #! line: ${SHEBANG_FLAGS}`
    const of = RUNS > 1 ? `, run ${run} of ${RUNS}` : ''
    const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')
    console.log(`tokengate serve (installed layout, dist/, ${started}${backend.label}${of}):`)
    console.log(
      `  RSS ${mb1(measured.rss)} MB with ${TOTAL} PATs stored and ${tokens.length} cached, each requested twice over HTTP (target < 150 MB); anonymous ${mb1(measured.anonymous)} MB, file-backed ${mb1(measured.rss - measured.anonymous)} MB; peak RSS ${mb1(measured.peak)} MB; passes took ${measured.passMs.join(' and ')} ms, server CPU ${measured.passCpuUs.join(' and ')} µs per request; RSS after 10 s more idle ${mb1(measured.idleRss)} MB; load average ${load}`,
    )
  }
}

/**
 * Where the served process keeps its data, fresh for every start: `fresh()` returns the
 * variables that point it there (none for SQLite: a copy of the seeded file in the data dir).
 */
interface Backend {
  /** Printed after the start's flags: '' for SQLite, as before `--store` existed. */
  readonly label: string
  fresh(): Promise<Record<string, string>>
  close(): Promise<void>
}

const sqliteBackend: Backend = {
  label: '',
  async fresh() {
    freshStore()
    return {}
  },
  async close() {},
}

/**
 * `--store postgres`: the deployment of deploy/kubernetes/overlays/postgres-redis, one
 * throwaway Postgres and Redis on 127.0.0.1 (test/helpers/services.ts). The SQLite seed's
 * 1,000,000 PATs (the same records, so the same warm-up tokens) are copied into a template
 * database through the stores' own `listPats` and `insertPats`; every start gets a database
 * cloned from it (`CREATE DATABASE ... TEMPLATE`) and a new Redis, so that no run's writes
 * (last-used times, usage, audit, rate-limit counters) reach the next.
 */
async function postgresBackend(): Promise<Backend> {
  const { startPostgres, startRedis } = await import('../test/helpers/services.ts')
  const { default: pg } = await import('pg')
  const server = await startPostgres()
  const admin = async (sql: string) => {
    const client = new pg.Client({ connectionString: server.url })
    await client.connect()
    try {
      await client.query(sql)
    } finally {
      await client.end()
    }
  }
  let redis: Awaited<ReturnType<typeof startRedis>> | undefined
  let current = ''
  try {
    const seededUrl = await server.createDatabase()
    const template = new URL(seededUrl).pathname.slice(1)
    const started = performance.now()
    const copied = await copySeedTo(seededUrl)
    console.log(
      `copied ${copied} PATs from the SQLite seed into Postgres (listPats pages of 1,000, insertPats batches of 10,000) in ${Math.round(performance.now() - started)} ms`,
    )
    let run = 0
    return {
      label: ', store: Postgres + Redis',
      async fresh() {
        await redis?.stop()
        if (current) await admin(`DROP DATABASE ${current}`)
        current = `${template}_run${++run}`
        await admin(`CREATE DATABASE ${current} TEMPLATE ${template}`)
        redis = await startRedis()
        return {
          DATABASE_URL: `postgres://postgres@127.0.0.1:${server.port}/${current}`,
          REDIS_URL: redis.url,
        }
      },
      async close() {
        await redis?.stop()
        await server.stop()
      },
    }
  } catch (error) {
    await server.stop()
    throw error
  }
}

/** Copies the seeded SQLite file's tenant and PATs into the (empty) Postgres database at `url`. */
async function copySeedTo(url: string): Promise<number> {
  const { openPostgresStore } = await import('../src/stores/postgres.ts')
  const source = join(dir, 'copy-source.db')
  copyFileSync(seedFile, source)
  const from = openSqliteStore(source)
  // PgStore is a SqlStore (postgres.ts); its public type does not list insertPats.
  const to = (await openPostgresStore(url, { listen: false })) as Awaited<
    ReturnType<typeof openPostgresStore>
  > &
    Pick<SqliteStore, 'insertPats'>
  let copied = 0
  try {
    // A seed kept by --data-dir may predate migrations (a server migrates it at start).
    await from.migrate()
    await to.migrate()
    await to.createTenant({ id: TENANT, name: 'Memory' }, Date.now())
    let batch: PatRecord[] = []
    let cursor: string | null | undefined
    do {
      const page = await from.listPats(TENANT, { limit: 1000, cursor: cursor ?? undefined })
      batch.push(...page.items)
      cursor = page.nextCursor
      if (batch.length >= 10_000 || cursor === null) {
        await to.insertPats(batch)
        copied += batch.length
        batch = []
      }
    } while (cursor !== null)
  } finally {
    await from.close()
    await to.close()
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${source}${suffix}`, { force: true })
  }
  return copied
}

interface Replayed {
  readonly rss: number
  readonly anonymous: number
  readonly peak: number
  readonly idleRss: number
  readonly passMs: readonly number[]
  readonly passCpuUs: readonly string[]
  readonly replayHits: number
  readonly replayMisses: number
  readonly entries: number
}

async function startAndReplay(
  dataDir: string,
  tokens: readonly string[],
  bin: string,
  compileCache: string,
  withMetrics: boolean,
  storeEnv: Record<string, string>,
): Promise<Replayed> {
  const metricsPort = withMetrics ? await freePort() : 0
  const configFile = join(dataDir, 'memory-bench.json')
  writeFileSync(
    configFile,
    JSON.stringify({
      log: { level: 'warn' },
      rateLimit: { perTenant: { max: 1_000_000_000 } },
      auth: { lookupCacheTtlMs: 3_600_000 },
      ...(withMetrics ? { metrics: { enabled: true, port: metricsPort } } : {}),
    }),
  )
  const serve = ['serve', '--http', '--listen', '127.0.0.1:0', '--json']
  const [command, commandArgs] = EXTRA_NODE_FLAGS
    ? [
        process.execPath,
        [...`${SHEBANG_FLAGS} ${EXTRA_NODE_FLAGS}`.split(' ').filter(Boolean), bin, ...serve],
      ]
    : [bin, serve]
  const child = spawn(command, commandArgs, {
    env: {
      ...(withMetrics
        ? {}
        : {
            NODE_OPTIONS: [
              HEAP_SNAPSHOT ? `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${dataDir}` : '',
              HEAP_STATS ? '--inspect=127.0.0.1:0' : '',
            ].join(' '),
          }),
      // Node 24 first, as `npm run` puts it: the bin's `#!/usr/bin/env -S node ...` finds it.
      PATH: `${dirname(process.execPath)}:${process.env.PATH}`,
      NODE_COMPILE_CACHE: compileCache,
      TOKENGATE_DATA_DIR: dataDir,
      TOKENGATE_CONFIG: configFile,
      ...storeEnv,
      ...EXTRA_ENV,
    },
    stdio: ['ignore', 'pipe', HEAP_STATS ? 'pipe' : 'inherit'],
  })
  let inspectorUrl = ''
  child.stderr?.on('data', (chunk: Buffer) => {
    const text = chunk.toString()
    // The last one: the bin starts itself again for `serve` (MALLOC_ARENA_MAX), a new inspector.
    inspectorUrl = /Debugger listening on (ws:\S+)/.exec(text)?.[1] ?? inspectorUrl
    if (!/Debugger|inspector|For help, see/.test(text)) process.stderr.write(text)
  })
  try {
    let stdout = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
    })
    for (let i = 0; i < 600 && !stdout.trim().endsWith('}'); i++) await sleep(50)
    const { url } = JSON.parse(stdout) as { url: string }
    const cacheCounters = async () => {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
      const value = (name: string) =>
        Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN)
      return {
        hits: value('tokengate_lookup_cache_hits_total'),
        misses: value('tokengate_lookup_cache_misses_total'),
        entries: value('tokengate_lookup_cache_entries'),
      }
    }
    const passMs: number[] = []
    const passCpuUs: string[] = []
    let before = { hits: 0, misses: 0, entries: 0 }
    if (HEAP_STATS && !withMetrics) {
      console.log(`  started, before the load: RSS ${mb(readProc(child.pid as number).rss)} MB`)
      printHeapStats(await evaluateIn(inspectorUrl, HEAP_STATS_EXPRESSION))
      printAnonymousMappings(child.pid as number)
    }
    for (let pass = 1; pass <= 2; pass++) {
      if (pass === 2 && withMetrics) before = await cacheCounters()
      const started = performance.now()
      const cpuBefore = cpuMs(child.pid as number)
      // --heap-stats: one reading half-way through the second pass, while the load runs.
      const during =
        HEAP_STATS && !withMetrics && pass === 2
          ? sleep((passMs[0] as number) / 2).then(async () => {
              const rss = readProc(child.pid as number).rss
              console.log(`  during the load (half-way through pass 2): RSS ${mb(rss)} MB`)
              printHeapStats(await evaluateIn(inspectorUrl, HEAP_STATS_EXPRESSION))
              printAnonymousMappings(child.pid as number)
            })
          : undefined
      const sampling =
        HEAP_SAMPLING && !withMetrics && pass === 2 ? await startSampling(inspectorUrl) : undefined
      // The pass's highest RSS and when; --heap-stats: readings every 10 s of the first pass
      // (the cache filling, where the peak has been since 6edaaa3).
      let highest = { rss: 0, at: 0 }
      const tracer = withMetrics
        ? undefined
        : setInterval(() => {
            const rss = readProc(child.pid as number).rss
            if (rss > highest.rss) highest = { rss, at: performance.now() - started }
          }, 250)
      let readings = Promise.resolve()
      const reader =
        HEAP_STATS && !withMetrics && pass === 1
          ? setInterval(() => {
              readings = readings.then(async () => {
                const rss = readProc(child.pid as number).rss
                const at = ((performance.now() - started) / 1000).toFixed(0)
                console.log(`  during the load (pass 1, ${at} s in): RSS ${mb(rss)} MB`)
                printHeapStats(await evaluateIn(inspectorUrl, HEAP_STATS_EXPRESSION))
                printAnonymousMappings(child.pid as number)
              })
            }, 10_000)
          : undefined
      await requestEach(url, tokens)
      clearInterval(tracer)
      clearInterval(reader)
      await readings
      if (tracer) {
        const at = `${(highest.at / 1000).toFixed(1)} s of ${((performance.now() - started) / 1000).toFixed(1)}`
        console.log(`  pass ${pass}: highest RSS ${mb(highest.rss)} MB, ${at} s in`)
      }
      await during
      if (sampling) printSampling(await sampling.stop())
      passMs.push(Math.round(performance.now() - started))
      passCpuUs.push((((cpuMs(child.pid as number) - cpuBefore) * 1000) / tokens.length).toFixed(0))
    }
    const after = withMetrics ? await cacheCounters() : before
    // On Postgres + Redis: that the server ran on both (change feed connected, Redis up).
    if (storeEnv.DATABASE_URL && !withMetrics) {
      console.log(`  /readyz after the load: ${await (await fetch(`${url}/readyz`)).text()}`)
    }
    // RSS every 500 ms from the end of the load: the 2 s reading and the one 10 s later are
    // two points of this line, which shows when the process gave memory back.
    const timeline: number[] = []
    const sampler = setInterval(() => timeline.push(readProc(child.pid as number).rss), 500)
    await sleep(2000)
    const proc = readProc(child.pid as number)
    if (HEAP_STATS && !withMetrics) {
      printHeapStats(await evaluateIn(inspectorUrl, HEAP_STATS_EXPRESSION))
      printAnonymousMappings(child.pid as number)
    }

    await sleep(10_000)
    clearInterval(sampler)
    const idleRss = readProc(child.pid as number).rss
    if (!withMetrics) {
      console.log(
        `  RSS every 500 ms after the load (MB): ${timeline.map((rss) => (rss / 1024 / 1024).toFixed(0)).join(' ')}; highest ${(Math.max(...timeline) / 1024 / 1024).toFixed(1)} MB`,
      )
    }
    if (HEAP_STATS && !withMetrics) {
      console.log('  10 s later:')
      printHeapStats(await evaluateIn(inspectorUrl, HEAP_STATS_EXPRESSION))
      printAnonymousMappings(child.pid as number)
    }
    if (HEAP_SNAPSHOT && !withMetrics) await writeHeapSnapshot(child.pid as number, url, dataDir)
    return {
      ...proc,
      idleRss,
      passMs,
      passCpuUs,
      replayHits: after.hits - before.hits,
      replayMisses: after.misses - before.misses,
      entries: after.entries,
    }
  } finally {
    child.kill('SIGTERM')
    await new Promise((resolve) => child.once('exit', resolve))
  }
}

/**
 * What `--heap-stats` reads from each thread of the served process (through the inspector):
 * its isolate's heap by space, its external memory and ArrayBuffers, V8's own malloc.
 */
const HEAP_STATS_EXPRESSION = `JSON.stringify({
  usage: process.memoryUsage(),
  heap: process.getBuiltinModule('v8').getHeapStatistics(),
  spaces: process.getBuiltinModule('v8').getHeapSpaceStatistics(),
})`

/**
 * Evaluates `expression` in the main thread of the process whose inspector listens at `url`
 * and in each of its worker threads (the inspector's NodeWorker domain): their string values,
 * the main thread's first.
 */
async function evaluateIn(
  url: string,
  expression: string,
): Promise<{ thread: string; value: string }[]> {
  const socket = new WebSocket(url)
  await new Promise((resolve, reject) => {
    socket.onopen = resolve
    socket.onerror = reject
  })
  const evaluate = { method: 'Runtime.evaluate', params: { expression, returnByValue: true } }
  const answers: { thread: string; value: string }[] = []
  const workers = new Map<string, string>()
  let mainDone: () => void = () => {}
  const main = new Promise<void>((resolve) => {
    mainDone = resolve
  })
  let enabledDone: () => void = () => {}
  const enabled = new Promise<void>((resolve) => {
    enabledDone = resolve
  })
  socket.onmessage = (event) => {
    const message = JSON.parse(String(event.data)) as {
      id?: number
      method?: string
      params?: { sessionId: string; workerInfo?: { url: string }; message?: string }
      result?: { result: { value: string } }
    }
    if (message.id === 1) {
      answers.unshift({ thread: 'main', value: message.result?.result.value ?? '' })
      mainDone()
    } else if (message.id === 2) {
      enabledDone()
    } else if (message.method === 'NodeWorker.attachedToWorker' && message.params) {
      const { sessionId, workerInfo } = message.params
      workers.set(sessionId, (workerInfo?.url ?? '').replace(/^.*\//, ''))
      socket.send(
        JSON.stringify({
          id: 3,
          method: 'NodeWorker.sendMessageToWorker',
          params: { sessionId, message: JSON.stringify({ id: 1, ...evaluate }) },
        }),
      )
    } else if (message.method === 'NodeWorker.receivedMessageFromWorker' && message.params) {
      const reply = JSON.parse(message.params.message ?? '{}') as {
        id?: number
        result?: { result: { value: string } }
      }
      if (reply.id === 1) {
        answers.push({
          thread: workers.get(message.params.sessionId) ?? 'worker',
          value: reply.result?.result.value ?? '',
        })
      }
    }
  }
  socket.send(JSON.stringify({ id: 1, ...evaluate }))
  socket.send(
    JSON.stringify({
      id: 2,
      method: 'NodeWorker.enable',
      params: { waitForDebuggerOnStart: false },
    }),
  )
  await Promise.all([main, enabled])
  // The running workers attach as the domain is enabled; each answers within a few ms.
  await sleep(100)
  for (let i = 0; i < 40 && answers.length < workers.size + 1; i++) await sleep(50)
  socket.close()
  return answers
}

interface SamplingNode {
  callFrame: { functionName: string; url: string; lineNumber: number }
  selfSize: number
  children: SamplingNode[]
}

/**
 * `--heap-sampling`: starts V8's sampling heap profiler in the main thread, keeping samples of
 * objects a major GC collected (what was promoted and then died: the old space's garbage), not
 * those a scavenge collected. `stop()` returns the profile's root.
 */
async function startSampling(url: string): Promise<{ stop: () => Promise<SamplingNode> }> {
  const socket = new WebSocket(url)
  await new Promise((resolve, reject) => {
    socket.onopen = resolve
    socket.onerror = reject
  })
  const waiting = new Map<number, (result: unknown) => void>()
  let id = 0
  socket.onmessage = (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown }
    if (message.id !== undefined) waiting.get(message.id)?.(message.result)
  }
  const send = (method: string, params: object = {}) =>
    new Promise<unknown>((resolve) => {
      waiting.set(++id, resolve)
      socket.send(JSON.stringify({ id, method, params }))
    })
  await send('HeapProfiler.enable')
  await send('HeapProfiler.startSampling', {
    samplingInterval: 16_384,
    includeObjectsCollectedByMajorGC: true,
  })
  return {
    async stop() {
      const result = (await send('HeapProfiler.stopSampling')) as {
        profile: { head: SamplingNode }
      }
      socket.close()
      return result.profile.head
    },
  }
}

/** The sampled bytes by allocating function (self), the largest first. */
function printSampling(root: SamplingNode): void {
  const bySite = new Map<string, number>()
  let total = 0
  const walk = (node: SamplingNode) => {
    const { functionName, url, lineNumber } = node.callFrame
    const site = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(dist|node_modules)\//, '$1/')}:${lineNumber + 1}`
    bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize)
    total += node.selfSize
    for (const child of node.children) walk(child)
  }
  walk(root)
  console.log(
    `  sampled over pass 2 (live at the end or collected by a major GC): ${(total / 1024 / 1024).toFixed(1)} MB; by allocating function:`,
  )
  for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, 20)) {
    console.log(`    ${(bytes / 1024 / 1024).toFixed(2)} MB  ${site}`)
  }
}

/** `--heap-stats`: per thread, the V8 heap by space (committed and used) and external memory. */
function printHeapStats(threads: { thread: string; value: string }[]): void {
  const mb1 = (bytes: number) => (bytes / 1024 / 1024).toFixed(1)
  for (const { thread, value } of threads) {
    const { usage, heap, spaces } = JSON.parse(value) as {
      usage: NodeJS.MemoryUsage
      heap: { malloced_memory: number; peak_malloced_memory: number }
      spaces: { space_name: string; physical_space_size: number; space_used_size: number }[]
    }
    console.log(
      `  heap stats at the RSS reading, ${thread} thread: V8 heap committed ${mb1(usage.heapTotal)} MB, used ${mb1(usage.heapUsed)} MB (no GC forced); external ${mb1(usage.external)} MB, of which ArrayBuffers ${mb1(usage.arrayBuffers)} MB; V8 malloc ${mb1(heap.malloced_memory)} MB (peak ${mb1(heap.peak_malloced_memory)})`,
    )
    console.log(
      `    by space (committed/used MB): ${spaces
        .filter((space) => space.physical_space_size > 0)
        .map(
          (space) =>
            `${space.space_name} ${mb1(space.physical_space_size)}/${mb1(space.space_used_size)}`,
        )
        .join(', ')}`,
    )
  }
}

/**
 * Signals the served process to write a heap snapshot into `dir` and prints its summary. The
 * process writes it on its main thread, so it answers /healthz again once the file is complete.
 */
async function writeHeapSnapshot(pid: number, url: string, dir: string): Promise<void> {
  const before = new Set(readdirSync(dir))
  process.kill(pid, 'SIGUSR2')
  await sleep(500)
  await fetch(`${url}/healthz`)
  const file = readdirSync(dir).find((name) => name.endsWith('.heapsnapshot') && !before.has(name))
  if (file === undefined) throw new Error('no heap snapshot was written')
  printHeapSummary(join(dir, file))
}

/** Requests /api/v1/me once with each token, 16 at a time over keep-alive connections. */
async function requestEach(url: string, tokens: readonly string[]): Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 16 })
  let next = 0
  const worker = async () => {
    while (next < tokens.length) {
      const token = tokens[next++] as string
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.get(
          `${url}/api/v1/me`,
          { agent, headers: { authorization: `Bearer ${token}` } },
          (res) => {
            res.resume()
            res.on('end', () => resolve(res.statusCode ?? 0))
          },
        )
        req.on('error', reject)
      })
      if (status !== 200) throw new Error(`request answered ${status}`)
    }
  }
  await Promise.all(Array.from({ length: 16 }, worker))
  agent.destroy()
}

function readProc(pid: number): { rss: number; anonymous: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1]) * 1024
  return { rss: kb('VmRSS'), anonymous: kb('RssAnon'), peak: kb('VmHWM') }
}

/**
 * `--heap-stats`: the process's anonymous memory by kind of mapping (/proc/<pid>/smaps): the
 * main thread's malloc heap, other threads' malloc arenas (a read-write mapping followed by
 * its reserved rest, 64 MB in all and 64 MB-aligned), and the rest (V8's heap pages, typed
 * array data, thread stacks), the largest of them listed.
 */
function printAnonymousMappings(pid: number): void {
  const ARENA = 64 * 1024 * 1024
  const maps: { start: number; size: number; perms: string; name: string; rss: number }[] = []
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const header = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)\s*(.*)$/.exec(line)
    if (header) {
      const [start, end] = [
        Number.parseInt(header[1] ?? '', 16),
        Number.parseInt(header[2] ?? '', 16),
      ]
      const name = header[4] === '0' ? (header[5] ?? '') : 'file'
      maps.push({ start, size: end - start, perms: header[3] ?? '', name, rss: 0 })
      continue
    }
    const anonymous = /^Anonymous:\s+(\d+) kB/.exec(line)
    const last = maps.at(-1)
    if (anonymous && last) last.rss = Number(anonymous[1]) * 1024
  }
  const groups = new Map<string, { count: number; rss: number }>()
  const others: typeof maps = []
  for (const [i, map] of maps.entries()) {
    if (map.rss === 0) continue
    const next = maps[i + 1]
    const arena =
      map.name === '' &&
      map.start % ARENA === 0 &&
      (map.size === ARENA ||
        (next?.start === map.start + map.size &&
          next.perms === '---p' &&
          map.size + next.size === ARENA))
    const kind =
      map.name === '[heap]'
        ? 'main malloc heap'
        : arena
          ? 'thread malloc arenas'
          : map.name
            ? map.name
            : ''
    if (kind === '') {
      others.push(map)
      continue
    }
    const group = groups.get(kind) ?? { count: 0, rss: 0 }
    group.count++
    group.rss += map.rss
    groups.set(kind, group)
  }
  const rest = others.reduce((sum, map) => sum + map.rss, 0)
  console.log(
    `  anonymous memory by mapping: ${[...groups].map(([kind, g]) => `${kind} ${mb(g.rss)} MB (${g.count})`).join(', ')}, other anonymous ${mb(rest)} MB (${others.length} mappings; largest: ${others
      .sort((a, b) => b.rss - a.rss)
      .slice(0, 6)
      .map((map) => `${mb(map.rss)} of ${mb(map.size)}`)
      .join(', ')} MB)`,
  )
}

/** User + system CPU time of a process, in ms (/proc/<pid>/stat, clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = (readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1] ?? '').split(' ')
  return (Number(fields[11]) + Number(fields[12])) * 10
}

async function freePort(): Promise<number> {
  const server = net.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as net.AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

/**
 * The package as npm installs it, in `dir`: bin/ and the freshly built dist/ copied (the bin
 * runs dist/ only where no src/ is beside it), package.json, and node_modules linked to this
 * clone's (the dependencies).
 */
function installedLayout(dir: string): string {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..')
  execFileSync(process.execPath, [join(root, 'scripts/build.ts')], { stdio: 'inherit' })
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  cpSync(join(root, 'bin'), join(dir, 'bin'), { recursive: true })
  cpSync(join(root, 'dist'), join(dir, 'dist'), { recursive: true })
  cpSync(join(root, 'package.json'), join(dir, 'package.json'))
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'))
  return join(dir, 'bin', 'tokengate.js')
}

if (values['warm-phase'] !== undefined) {
  await warmPhase(values['warm-phase'], String(values['warm-tokens']), String(values['warm-label']))
  process.exit(0)
}

const keptDir = values['data-dir'] ?? ''
const dir = keptDir || mkdtempSync(join(tmpdir(), 'tg-mem-'))
const tokenFile = join(dir, 'warm.txt')
const seedFile = join(dir, 'seeded.db')
try {
  if (keptDir !== '' && existsSync(tokenFile)) console.log(`reusing the store seeded in ${dir}`)
  else await seedAndTimeColdLookups()
  // Every start opens a copy of the seeded file, so that one run's writes (last-used times)
  // never reach the next run's store.
  const compileCache = join(dir, 'compile-cache')
  rmSync(compileCache, { recursive: true, force: true })
  const starts = [
    [
      `first start (compile cache empty), ${PRODUCTION_NODE_FLAGS.join(' ')}`,
      PRODUCTION_NODE_FLAGS,
    ],
    ['later start (compile cache filled), default Node flags', []],
    [
      `later start (compile cache filled), ${PRODUCTION_NODE_FLAGS.join(' ')}`,
      PRODUCTION_NODE_FLAGS,
    ],
  ] as const
  // The in-process warm-ups open the SQLite file themselves: on Postgres only the served phase.
  if (STORE === 'postgres' && !ONLY_SERVE) console.log('--store postgres: served phase only')
  for (const [label, flags] of ONLY_SERVE || STORE === 'postgres' ? [] : starts) {
    freshStore()
    const output = execFileSync(
      process.execPath,
      [
        '--expose-gc',
        ...flags,
        process.argv[1] as string,
        '--pats',
        String(TOTAL),
        '--warm',
        String(WARM),
        '--warm-phase',
        join(dir, 'tokengate.db'),
        '--warm-tokens',
        tokenFile,
        '--warm-label',
        label,
      ],
      { encoding: 'utf8', env: { ...process.env, NODE_COMPILE_CACHE: compileCache } },
    )
    process.stdout.write(output)
  }
  const backend = STORE === 'postgres' ? await postgresBackend() : sqliteBackend
  try {
    const installed = installedLayout(join(dir, 'package'))
    await servePhase(dir, tokenFile, installed, join(dir, 'compile-cache-installed'), backend)
  } finally {
    await backend.close()
  }
} finally {
  if (keptDir === '') rmSync(dir, { recursive: true, force: true })
  else removeStore()
}

/** The store a start opens: a copy of the seeded file, with no WAL left from an earlier run. */
function freshStore(): void {
  removeStore()
  copyFileSync(seedFile, join(dir, 'tokengate.db'))
}

function removeStore(): void {
  for (const suffix of ['', '-wal', '-shm'])
    rmSync(join(dir, `tokengate.db${suffix}`), { force: true })
}

/** Seeds `seedFile` and the warm-up token list, timing cold lookups against a small store. */
async function seedAndTimeColdLookups(): Promise<void> {
  const started = performance.now()
  const big = openSqliteStore(seedFile)
  const tokens = await seed(big, TOTAL, Math.max(WARM, SAMPLE * 2))
  console.log(
    `seeded ${TOTAL} PATs with insertPats in ${Math.round(performance.now() - started)} ms`,
  )

  // Cold lookups first (nothing cached yet). Round 0 warms the statement caches on both
  // stores; then ROUNDS interleaved rounds, each with a fresh cache and, on the big store, a
  // different 1,000 tokens (so SQLite's page cache has not seen them either), and the median
  // ratio is reported: one pass on a shared machine varied from 1.5x to 2.8x.
  const small = openSqliteStore(join(dir, 'small.db'))
  const smallTokens = await seed(small, SAMPLE, SAMPLE)
  await coldLookupUs(big, tokens.slice(0, 200))
  await coldLookupUs(small, smallTokens.slice(0, 200))
  const ROUNDS = 5
  const rounds: Array<{ bigUs: number; smallUs: number }> = []
  for (let round = 1; round <= ROUNDS; round++) {
    const end = Math.max(WARM - SAMPLE * (round - 1), SAMPLE)
    const sample = tokens.slice(Math.max(end - SAMPLE, 0), end)
    const bigUs = await coldLookupUs(big, sample)
    const smallUs = await coldLookupUs(small, smallTokens)
    rounds.push({ bigUs, smallUs })
  }
  const ratios = rounds.map((r) => r.bigUs / r.smallUs).sort((x, y) => x - y)
  const us = (pick: (r: { bigUs: number; smallUs: number }) => number) =>
    rounds.map((r) => pick(r).toFixed(1)).join(', ')
  console.log(
    `cold PAT authenticate: ${us((r) => r.bigUs)} µs with ${TOTAL} stored, ${us((r) => r.smallUs)} µs with ${SAMPLE} stored; median ratio ${median(ratios).toFixed(2)} (rounds ${ratios.map((r) => r.toFixed(2)).join(', ')}; target ≤ 2)`,
  )
  await small.close()
  await big.close()
  writeFileSync(tokenFile, `${tokens.slice(0, WARM).join('\n')}\n`)
}
