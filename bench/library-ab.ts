/**
 * Issue #36: what `tokengate/fastify` costs per request over the naive peer, in one process.
 * Fastify apps answer `inject`ed requests in many short alternating rounds: the naive peer
 * (bench/servers/peer.ts's SHA-256 + Map hook), the library over the bare core and over
 * `createTokengate` (SQLite, limits counted) as bench/servers/library.ts builds them, and with
 * `--baseline DIR` the same two from an earlier tree. Printed per case: CPU µs per request
 * (median of rounds, and each app's paired difference from the naive peer in the same round)
 * and heap bytes allocated per request (a batch between two collections, with a young
 * generation large enough that no scavenge runs inside it).
 * No sockets: Node's HTTP parser and the write are the same for every app and not measured;
 * what is left is Fastify, the hooks and the auth work, the part the apps differ in.
 * Nor createTokengate's writes behind: `inject` in a loop never yields to timers, so its audit
 * and usage flushes and the SQLite writer thread's inserts run after the case, not in its
 * rounds (pausing after each round put other apps' deferred GC work in the pause: ±50 µs/req).
 * Its rows are the request path's work; `bench/run.ts` measures the served whole.
 *
 * Usage: node --expose-gc --max-semi-space-size=64 bench/library-ab.ts [--baseline DIR]
 *        [--rounds 40] [--requests 400] [--apps REGEX] [--no-limits]
 * `--apps REGEX`: only the apps whose name matches (the naive peer always runs), e.g.
 * `^createTokengate` for one tree's app (and its baseline's) per process: apps of one tree share
 * its modules, so their call sites' type feedback mixes the bare core's shapes with the whole
 * product's. `--no-limits`: createTokengate with rate limiting off (`rateLimit.enabled: false`).
 */
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { PerformanceObserver } from 'node:perf_hooks'
import { getHeapStatistics } from 'node:v8'
import Fastify from 'fastify'
import { readCli } from './cli.ts'
import {
  BENCH_TENANT,
  benchIssuers,
  loadFixtures,
  readPatRecords,
  seedBenchStore,
  UNLIMITED_RATE_LIMITS,
} from './fixtures.ts'
import { median } from './latency-stats.ts'

const { values } = readCli({
  script: 'bench/library-ab.ts',
  options: {
    baseline: { type: 'string', value: 'DIR' },
    rounds: { type: 'number', integer: true, default: 40 },
    requests: { type: 'number', integer: true, default: 400 },
    apps: { type: 'regex', default: /./ },
    'no-limits': { type: 'boolean' },
  },
})
const BASELINE = values.baseline === undefined ? undefined : resolve(values.baseline)
const APPS = values.apps
const LIMITS = !values['no-limits']
const ROUNDS = values.rounds
const REQUESTS = values.requests
const gc = (globalThis as { gc?: () => void }).gc
if (!gc) throw new Error('run with --expose-gc')
const fixtures = loadFixtures()

interface Injectable {
  inject(request: object): Promise<{ statusCode: number }>
}
interface App {
  readonly name: string
  readonly app: Injectable
  readonly close: () => Promise<void>
}

/** bench/servers/peer.ts's fastify-naive, as is. */
async function naive(): Promise<App> {
  const app = Fastify()
  const pats = new Map<string, { permissions: readonly string[]; tenantId: string }>()
  for (const record of readPatRecords(fixtures)) pats.set(record.tokenHash, record)
  app.addHook('onRequest', async (request, reply) => {
    const header = request.headers.authorization ?? ''
    const token = header.startsWith('Bearer ') ? header.slice(7) : ''
    const found = pats.get(createHash('sha256').update(token).digest('hex'))
    if (!found) return reply.code(401).send({ error: 'unauthorized' })
    if (request.url.startsWith('/api/v1/tokens') && !found.permissions.includes('tokens:read')) {
      return reply.code(403).send({ error: 'denied' })
    }
  })
  app.get('/*', async () => ({ ok: true }))
  await app.ready()
  return { name: 'fastify-naive', app, close: () => app.close() }
}

/** A tree's library app (bench/servers/library.ts's routes) over its bare core or createTokengate. */
async function library(tree: string, whole: boolean, name: string): Promise<App | undefined> {
  if (!APPS.test(name)) return undefined
  const index = await import(join(tree, 'src/index.ts'))
  const { tokengate } = await import(join(tree, 'src/adapters/fastify.ts'))
  let gate: object
  let done = async () => {}
  if (whole) {
    const dataDir = mkdtempSync(join(tmpdir(), 'tg-library-ab-'))
    await seedBenchStore(fixtures, dataDir)
    const product = await index.createTokengate({
      dataDir,
      rateLimit: { enabled: LIMITS, ...UNLIMITED_RATE_LIMITS },
    })
    gate = product
    done = async () => {
      await product.close()
      rmSync(dataDir, { recursive: true, force: true })
    }
  } else {
    const pats = new Map(readPatRecords(fixtures).map((r) => [r.tokenHash, r]))
    const tenant = { id: BENCH_TENANT, name: 'Bench', enabled: true, createdAt: 0 }
    gate = {
      authenticate: index.createAuthenticator({
        lookups: {
          findPatByHash: (hash: string) => pats.get(hash),
          findTenant: (id: string) => (id === BENCH_TENANT ? tenant : undefined),
        },
        jwt: index.createJwtVerifier(benchIssuers(fixtures)),
        clock: { now: () => Date.now() },
      }),
    }
  }
  const app = Fastify()
  await app.register(tokengate, gate)
  app.get('/api/v1/me', async (request) => ({
    subject: (request as { principal?: { subject: string } }).principal?.subject,
    tenant: (request as { principal?: { tenantId: string } }).principal?.tenantId,
  }))
  await app.ready()
  return {
    name,
    app,
    close: async () => {
      await app.close()
      await done()
    },
  }
}

const cases = [
  {
    id: 'PAT single',
    status: 200,
    url: '/api/v1/me',
    headers: { authorization: `Bearer ${fixtures.patSingle}` },
  },
  {
    id: '401 garbage',
    status: 401,
    url: '/api/v1/me',
    headers: { authorization: `Bearer ${fixtures.patGarbage}` },
  },
]

const built = [
  await naive(),
  await library(resolve('.'), false, 'library'),
  await library(resolve('.'), true, 'createTokengate'),
]
if (BASELINE) {
  built.push(await library(BASELINE, false, 'library@baseline'))
  built.push(await library(BASELINE, true, 'createTokengate@baseline'))
}
const apps = built.filter((app): app is App => app !== undefined)

let collections = 0
new PerformanceObserver((list) => {
  collections += list.getEntries().length
}).observe({ entryTypes: ['gc'] })

/** Heap bytes one request allocates: a batch between two collections, none inside it. */
async function allocatedPerRequest(app: Injectable, c: (typeof cases)[number]): Promise<number> {
  const samples: number[] = []
  for (let attempt = 0; attempt < 9; attempt++) {
    gc?.()
    await new Promise((r) => setImmediate(r))
    const seen = collections
    const before = getHeapStatistics().used_heap_size
    for (let i = 0; i < 200; i++)
      await app.inject({ method: 'GET', url: c.url, headers: c.headers })
    const after = getHeapStatistics().used_heap_size
    if (collections === seen) samples.push((after - before) / 200)
  }
  return median(samples)
}

console.log(
  `${ROUNDS} alternating rounds × ${REQUESTS} injected requests per app; CPU µs per request (median over rounds), paired difference from fastify-naive (median of per-round differences), heap bytes allocated per request`,
)
console.log('| case | app | CPU µs/req | − naive, paired | − baseline, paired | min | B/req |')
console.log('|---|---|---:|---:|---:|---:|---:|')
for (const c of cases) {
  const samples = new Map<string, number[]>(apps.map((a) => [a.name, []]))
  for (let round = -3; round < ROUNDS; round++) {
    // Rotate the order so no app always runs right after another's garbage.
    const shift = ((round % apps.length) + apps.length) % apps.length
    const order = [...apps.slice(shift), ...apps.slice(0, shift)]
    for (const { name, app } of order) {
      const before = process.cpuUsage()
      for (let i = 0; i < REQUESTS; i++) {
        const response = await app.inject({ method: 'GET', url: c.url, headers: c.headers })
        if (response.statusCode !== c.status) {
          throw new Error(`${c.id} on ${name}: ${response.statusCode}, expected ${c.status}`)
        }
      }
      const used = process.cpuUsage(before)
      if (round >= 0) samples.get(name)?.push((used.user + used.system) / REQUESTS)
    }
  }
  const base = samples.get('fastify-naive') ?? []
  for (const { name, app } of apps) {
    const own = samples.get(name) ?? []
    const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(2)}`
    const paired = median(own.map((v, i) => v - (base[i] ?? Number.NaN)))
    // This tree's app against the same app of the baseline tree, round by round.
    const before = samples.get(`${name}@baseline`)
    const vsBaseline = before ? median(own.map((v, i) => v - (before[i] ?? Number.NaN))) : undefined
    const bytes = await allocatedPerRequest(app, c)
    console.log(
      `| ${c.id} | ${name} | ${median(own).toFixed(2)} | ${name === 'fastify-naive' ? '—' : signed(paired)} | ${vsBaseline === undefined ? '' : signed(vsBaseline)} | ${Math.min(...own).toFixed(2)} | ${Math.round(bytes)} |`,
    )
  }
}
for (const app of apps) await app.close()
