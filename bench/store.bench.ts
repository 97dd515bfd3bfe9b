/**
 * PAT-authentication throughput on Postgres versus the embedded SQLite store: tokengate
 * (plain HTTP, `GET /api/v1/me`) on each store holding PATS tokens, driven with a pool of
 * distinct PATs in round robin, once with the lookup cache off (`lookupCacheTtlMs: 0`, so
 * every request reads the store) and once with the default cache. Prints requests/s, p50 and
 * p99 latency, and the Postgres/SQLite ratio for each cache setting.
 *
 * A throwaway Postgres is started from the installed binaries (test/helpers/services.ts);
 * tokengate runs in a child process, one configuration at a time, autocannon in this one,
 * all on 127.0.0.1. Each run lasts DURATION s with CONNECTIONS connections after a 1 s
 * warm-up (which also fills the cache in the cached runs). With `--rounds N` the SQLite and
 * Postgres runs alternate N times and the table shows the run with the median req/s, which
 * evens out a noisy (shared) machine.
 *
 * Run: `./node_modules/.bin/node bench/store.bench.ts`
 * (options: `--duration 5 --connections 32 --pats 1000 --rounds 1`).
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Store } from '../src/stores/store.ts'
import { readCli } from './cli.ts'
import { report, startReporting, stop } from './processes.ts'

interface AutocannonRequest {
  headers?: Record<string, string>
  [key: string]: unknown
}

/** The part of autocannon's programmatic API used here (the package ships no types). */
type Autocannon = (options: {
  url: string
  connections: number
  duration: number
  requests: Array<{
    method: string
    path: string
    setupRequest: (request: AutocannonRequest) => AutocannonRequest
  }>
}) => Promise<{
  requests: { average: number }
  latency: { p50: number; p99: number }
  errors: number
  timeouts: number
  non2xx: number
}>
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon

const { values } = readCli({
  script: 'bench/store.bench.ts',
  options: {
    role: { type: 'string' },
    'data-dir': { type: 'string' },
    'database-url': { type: 'string' },
    ttl: { type: 'string' },
    duration: { type: 'number', value: 'S', default: 5 },
    connections: { type: 'number', integer: true, default: 32 },
    pats: { type: 'number', integer: true, default: 1000 },
    rounds: { type: 'number', integer: true, default: 1 },
  },
  // This script's own child processes: left out of the usage.
  internal: ['role', 'data-dir', 'database-url', 'ttl'],
})

/** Child role: tokengate on the given store, printing its URL once listening. */
async function runServer(): Promise<void> {
  const { loadConfig } = await import('../src/config/load.ts')
  const { startTokengate } = await import('../src/main.ts')
  const databaseUrl = values['database-url']
  const config = loadConfig({
    env: {},
    overrides: {
      dataDir: values['data-dir'],
      ...(databaseUrl ? { databaseUrl } : {}),
      server: { host: '127.0.0.1', port: 0, plainHttp: true },
      log: { level: 'silent' },
      auth: { lookupCacheTtlMs: Number(values.ttl) },
      // One tenant at thousands of requests/s would hit the per-tenant limit within a
      // second: what is measured here is authentication, not 429s.
      rateLimit: { enabled: false },
    },
  })
  const running = await startTokengate(config)
  process.once('SIGTERM', () => {
    void running.close().then(() => process.exit(0))
  })
  report({ url: running.url })
}

/** One tenant and `count` PATs; returns their plaintexts. */
async function seed(store: Store, count: number): Promise<string[]> {
  const { issuePat } = await import('../src/core/pat.ts')
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: 'acme', name: 'Acme' }, now)
  const tokens: string[] = []
  for (let i = 0; i < count; i++) {
    const { token, record } = issuePat({
      tenantId: 'acme',
      subject: `svc-${i}`,
      name: `bench ${i}`,
      permissions: ['tokens:read'],
      expiresAt: now + 86_400_000,
      now,
    })
    await store.insertPat(record)
    tokens.push(token)
  }
  await store.close()
  return tokens
}

interface Row {
  readonly store: string
  readonly cache: string
  readonly 'req/s': number
  readonly 'p50 ms': number
  readonly 'p99 ms': number
  readonly errors: number
  readonly non2xx: number
}

async function load(url: string, tokens: readonly string[]) {
  let next = 0
  const options = {
    url,
    connections: values.connections,
    requests: [
      {
        method: 'GET',
        path: '/api/v1/me',
        // Round robin over every PAT, so the store (or cache) sees distinct keys.
        setupRequest: (request: AutocannonRequest) => {
          const token = tokens[next++ % tokens.length] as string
          return { ...request, headers: { ...request.headers, authorization: `Bearer ${token}` } }
        },
      },
    ],
  }
  await autocannon({ ...options, duration: 1 })
  return autocannon({ ...options, duration: values.duration })
}

async function main(): Promise<void> {
  const { startPostgres } = await import('../test/helpers/services.ts')
  const { openStore } = await import('../src/stores/open-store.ts')
  const count = values.pats
  const dataDir = mkdtempSync(join(tmpdir(), 'tokengate-store-bench-'))
  const pg = await startPostgres()
  try {
    const databaseUrl = await pg.createDatabase()
    const tokens = {
      sqlite: await seed(await openStore({ dataDir }), count),
      postgres: await seed(await openStore({ databaseUrl }), count),
    }
    const runs: Row[] = []
    for (let round = 0; round < values.rounds; round++) {
      for (const [cache, ttl] of [
        ['off (ttl 0)', '0'],
        ['default (2 s)', '2000'],
      ] as const) {
        for (const store of ['sqlite', 'postgres'] as const) {
          const where =
            store === 'sqlite'
              ? ['--data-dir', dataDir]
              : ['--data-dir', dataDir, '--database-url', databaseUrl]
          const server = await startReporting<{ url: string }>(undefined, [
            import.meta.filename,
            '--role',
            'server',
            ...where,
            '--ttl',
            ttl,
          ])
          try {
            const result = await load(server.info.url, tokens[store])
            runs.push({
              store,
              cache,
              'req/s': Math.round(result.requests.average),
              'p50 ms': result.latency.p50,
              'p99 ms': result.latency.p99,
              errors: result.errors + result.timeouts,
              non2xx: result.non2xx,
            })
          } finally {
            await stop(server.child)
          }
        }
      }
    }
    const rows = medianRuns(runs)
    console.log(
      `Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ` +
        `${values.duration} s × ${values.connections} connections, ${count} PATs, ` +
        `median of ${values.rounds} round(s), ` +
        `${new Date().toISOString()}`,
    )
    console.table(rows)
    for (const cache of new Set(rows.map((row) => row.cache))) {
      const rate = (store: string) =>
        rows.find((row) => row.store === store && row.cache === cache)?.['req/s'] ?? Number.NaN
      const ratio = rate('postgres') / rate('sqlite')
      console.log(`cache ${cache}: postgres/sqlite = ${ratio.toFixed(2)}`)
    }
    if (runs.some((row) => row.errors > 0 || row.non2xx > 0)) {
      console.log('WARNING: some requests failed; the numbers above do not measure PAT auth alone')
      process.exitCode = 1
    }
  } finally {
    await pg.stop()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

/** Per store and cache setting, the run with the median req/s (the lower middle one). */
function medianRuns(runs: readonly Row[]): Row[] {
  const groups = new Map<string, Row[]>()
  for (const run of runs) {
    const key = `${run.cache}|${run.store}`
    groups.set(key, [...(groups.get(key) ?? []), run])
  }
  return [...groups.values()].map((group) => {
    const sorted = [...group].sort((a, b) => a['req/s'] - b['req/s'])
    return sorted[Math.floor((sorted.length - 1) / 2)] as Row
  })
}

if (values.role === 'server') await runServer()
else await main()
