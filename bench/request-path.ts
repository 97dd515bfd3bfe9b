/**
 * What one request passes through: the `src/` files whose functions run and the Fastify
 * hooks on its route, for a known PAT and a repeated RS256 JWT on `GET /api/v1/me`, with the
 * server as `bench/servers/tokengate.ts` runs it (production defaults, logging at `warn`).
 *
 * Files come from V8's precise coverage (call counts reset after a warm-up, then one
 * request); hooks from the route context Fastify hands its handler's tracing channel.
 *
 * Run: `node bench/request-path.ts`
 */
import diagnostics from 'node:diagnostics_channel'
import { mkdtempSync, rmSync } from 'node:fs'
import { Session } from 'node:inspector/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../src/config/load.ts'
import { startTokengate } from '../src/main.ts'
import { BENCH_TENANT, loadFixtures, seedBenchStore } from './fixtures.ts'

const LIFECYCLE = [
  'onRequest',
  'preParsing',
  'preValidation',
  'preHandler',
  'preSerialization',
  'onSend',
  'onResponse',
] as const

const fixtures = loadFixtures()
const dataDir = mkdtempSync(join(tmpdir(), 'tg-request-path-'))
await seedBenchStore(fixtures, dataDir)
const running = await startTokengate(
  loadConfig({
    env: {},
    overrides: {
      dataDir,
      server: { host: '127.0.0.1', port: 0, plainHttp: true },
      log: { level: 'warn' },
    },
  }),
)

// Fastify passes the route's context (its merged hook arrays) to the handler's channel.
let hooks: Record<string, number> = {}
diagnostics.subscribe('tracing:fastify.request.handler:start', (message) => {
  const { request } = message as { request: object }
  const contextKey = Object.getOwnPropertySymbols(request).find(
    (symbol) => symbol.description === 'fastify.context',
  )
  const context = (request as Record<symbol, Record<string, unknown[] | null>>)[
    contextKey as symbol
  ]
  hooks = Object.fromEntries(LIFECYCLE.map((name) => [name, context?.[name]?.length ?? 0]))
})

const session = new Session()
session.connect()
await session.post('Profiler.enable')
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false })

const cases = {
  'PAT (known)': { authorization: `Bearer ${fixtures.patSingle}` },
  'JWT (RS256, repeated)': {
    authorization: `Bearer ${fixtures.algs.RS256.single}`,
    'x-tenant-id': BENCH_TENANT,
  },
}
const url = `${running.url}/api/v1/me`
for (const [name, headers] of Object.entries(cases)) {
  for (let i = 0; i < 200; i++) await expectOk(await fetch(url, { headers }))
  await session.post('Profiler.takePreciseCoverage') // resets the counts
  await expectOk(await fetch(url, { headers }))
  const { result } = await session.post('Profiler.takePreciseCoverage')
  const files = result
    .filter((script) => script.url.includes('/src/'))
    .filter((script) => script.functions.some((fn) => (fn.ranges[0]?.count ?? 0) > 0))
    .map((script) => script.url.slice(script.url.lastIndexOf('/src/') + 1))
    .sort()
  const hookCount = Object.values(hooks).reduce((sum, n) => sum + n, 0)
  const perPhase = Object.entries(hooks)
    .filter(([, n]) => n > 0)
    .map(([phase, n]) => `${phase} ${n}`)
    .join(', ')
  console.log(`${name}: ${files.length} files, ${hookCount} hooks (${perPhase})`)
  for (const file of files) console.log(`  ${file}`)
}

await session.post('Profiler.stopPreciseCoverage')
session.disconnect()
await running.close()
rmSync(dataDir, { recursive: true, force: true })

async function expectOk(response: Response): Promise<void> {
  await response.arrayBuffer()
  if (response.status !== 200) throw new Error(`expected 200, got ${response.status}`)
}
