/**
 * CPU µs per request of two trees' request paths, in one process: each tree's production
 * server (`buildServer` over a seeded SQLite store, the bench configuration of
 * bench/servers/tokengate.ts) answers `inject`ed requests, the two alternating in many short
 * rounds; the median of each is printed. No sockets: Node's HTTP parser and the write are not
 * measured (they are the same for both), only Fastify, the hooks and tokengate's own work.
 * Why: on a shared 2-core machine the load bench's per-process CPU drifts by ±20 % between
 * rounds; alternating small rounds inside one process keeps both sides under the same load.
 *
 * Usage: node --expose-gc bench/inject-ab.ts <baselineDir> [--rounds 40] [--requests 400]
 * (baselineDir: `git archive <commit> | tar -x -C DIR` with node_modules linked to this one's.)
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { readCli } from './cli.ts'
import {
  BENCH_TENANT,
  benchIssuers,
  loadFixtures,
  readPatRecords,
  UNLIMITED_RATE_LIMITS,
} from './fixtures.ts'
import { median } from './latency-stats.ts'

const { values, positionals } = readCli({
  script: 'bench/inject-ab.ts',
  positionals: ['<baselineDir>'],
  options: {
    rounds: { type: 'number', integer: true, default: 40 },
    requests: { type: 'number', integer: true, default: 400 },
  },
})
const baseline = positionals[0] as string
const ROUNDS = values.rounds
const REQUESTS = values.requests
const fixtures = loadFixtures()

interface Injectable {
  inject(request: object): Promise<{ statusCode: number }>
  close(): Promise<unknown>
}

/** The tree's production server as the load bench runs it, built but not listening. */
async function build(tree: string): Promise<{ app: Injectable; done: () => Promise<void> }> {
  const from = (path: string) => import(join(tree, path))
  const { loadConfig } = await from('src/config/load.ts')
  const { openStore } = await from('src/stores/open-store.ts')
  const { createAuthContext } = await from('src/auth/auth-context.ts')
  const { buildServer } = await from('src/server/server.ts')
  const { createLogger } = await from('src/logger.ts')
  const dataDir = mkdtempSync(join(tmpdir(), 'tg-inject-ab-'))
  const seed = await openStore({ dataDir })
  await seed.migrate()
  const now = Date.now()
  await seed.createTenant({ id: BENCH_TENANT, name: 'Bench' }, now)
  await seed.insertPats(readPatRecords(fixtures))
  for (const issuer of benchIssuers(fixtures)) await seed.putIssuer(issuer, now)
  await seed.close()
  const config = loadConfig({
    env: {},
    overrides: {
      dataDir,
      server: { host: '127.0.0.1', port: 0, plainHttp: true },
      log: { level: 'warn' },
      rateLimit: UNLIMITED_RATE_LIMITS,
    },
  })
  const logger = createLogger('warn')
  const store = await openStore({ dataDir })
  const auth = await createAuthContext(config, store, { now: () => Date.now() }, logger)
  const app = (await buildServer({ config, auth, logger })) as Injectable
  return {
    app,
    done: async () => {
      await app.close()
      await auth.close()
      rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const jwt = (token: string, tenant = BENCH_TENANT) => ({ ...bearer(token), 'x-tenant-id': tenant })
const cases = [
  { id: 'PAT single', status: 200, url: '/api/v1/me', headers: bearer(fixtures.patSingle) },
  {
    id: 'JWT RS256 single',
    status: 200,
    url: '/api/v1/me',
    headers: jwt(fixtures.algs.RS256.single),
  },
  { id: '401 garbage', status: 401, url: '/api/v1/me', headers: bearer(fixtures.patGarbage) },
  {
    id: '401 bad checksum',
    status: 401,
    url: '/api/v1/me',
    headers: bearer(fixtures.patBadChecksum),
  },
  {
    id: 'JWT wrong X-Tenant-Id → 401',
    status: 401,
    url: '/api/v1/me',
    headers: jwt(fixtures.algs.RS256.single, 'other-tenant'),
  },
  { id: '403', status: 403, url: '/api/v1/tokens', headers: jwt(fixtures.forbiddenJwt) },
]

const trees = [
  { name: 'baseline', ...(await build(resolve(baseline))) },
  { name: 'this tree', ...(await build(resolve('.'))) },
]

console.log(
  `${ROUNDS} alternating rounds × ${REQUESTS} requests; CPU µs per request, median and minimum`,
)
console.log(
  '| case | baseline median | this tree median | change | baseline min | this tree min | change |',
)
console.log('|---|---:|---:|---:|---:|---:|---:|')
for (const c of cases) {
  const samples = new Map<string, number[]>(trees.map((t) => [t.name, []]))
  for (let round = -2; round < ROUNDS; round++) {
    // Alternate which tree goes first, so neither always runs right after a GC of the other.
    const order = round % 2 === 0 ? trees : [...trees].reverse()
    for (const tree of order) {
      const before = process.cpuUsage()
      for (let i = 0; i < REQUESTS; i++) {
        const response = await tree.app.inject({ method: 'GET', url: c.url, headers: c.headers })
        if (response.statusCode !== c.status) {
          throw new Error(`${c.id} on ${tree.name}: ${response.statusCode}, expected ${c.status}`)
        }
      }
      const used = process.cpuUsage(before)
      // The first two rounds warm the JIT and the caches; they are not counted.
      if (round >= 0) samples.get(tree.name)?.push((used.user + used.system) / REQUESTS)
    }
  }
  const [a = 0, b = 0] = trees.map((t) => median(samples.get(t.name) ?? []))
  // The minimum is the round least disturbed by other processes on a shared machine.
  const [minA = 0, minB = 0] = trees.map((t) => Math.min(...(samples.get(t.name) ?? [])))
  const change = (x: number, y: number) => `${(((y - x) / x) * 100).toFixed(0)} %`
  console.log(
    `| ${c.id} | ${a.toFixed(1)} | ${b.toFixed(1)} | ${change(a, b)} | ${minA.toFixed(1)} | ${minB.toFixed(1)} | ${change(minA, minB)} |`,
  )
}
for (const tree of trees) await tree.done()
