/**
 * tokengate in library mode, as an application embeds it: a Fastify app with
 * `tokengate/fastify`. Answers the peers' routes: `GET /api/v1/me` (any valid token) and
 * `GET /api/v1/tokens` (`tokens:read`).
 *
 * Two gates:
 * - default: the bare core, the public `createAuthenticator` with PATs and the tenant in memory
 *   (no store, no rate limiting, no audit), the node:crypto JWT verifier over the bench issuers;
 * - `--create-tokengate`: the whole product, `createTokengate` over an embedded SQLite store
 *   seeded with the bench tenant, PATs and issuers (cached lookups, change feed, rate limits,
 *   last-used times, audit), its quotas raised as in bench/servers/tokengate.ts so the load's
 *   one token is never answered 429 (the limiter still counts every request).
 *
 * `--no-limits` (with `--create-tokengate`): rate limiting off (`rateLimit.enabled: false`), so
 * nothing is counted and no RateLimit pair is sent: what the limit step costs served.
 *
 * Usage: node bench/servers/library.ts <fixturesDir> <port> [--create-tokengate [--no-limits]]
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import { tokengate } from '../../src/adapters/fastify.ts'
import {
  createAuthenticator,
  createJwtVerifier,
  createTokengate,
  type PatRecord,
  type Tenant,
} from '../../src/index.ts'
import {
  BENCH_TENANT,
  benchIssuers,
  type Fixtures,
  loadFixtures,
  readPatRecords,
  seedBenchStore,
  UNLIMITED_RATE_LIMITS,
} from '../fixtures.ts'

// Flags may come before or after the two positional arguments (bench/run.ts appends the port).
const [fixturesDir, portText] = process.argv.slice(2).filter((a) => !a.startsWith('--'))
const fixtures = loadFixtures(fixturesDir)

/** The bare core: lookups in memory. */
function bareCore(fixtures: Fixtures) {
  const pats = new Map<string, PatRecord>(readPatRecords(fixtures).map((r) => [r.tokenHash, r]))
  const tenant: Tenant = { id: BENCH_TENANT, name: 'Bench', enabled: true, createdAt: 0 }
  return {
    gate: {
      authenticate: createAuthenticator({
        lookups: {
          findPatByHash: (hash) => pats.get(hash),
          findTenant: (id) => (id === BENCH_TENANT ? tenant : undefined),
        },
        jwt: createJwtVerifier(benchIssuers(fixtures)),
        clock: { now: () => Date.now() },
      }),
    },
    close: async () => {},
  }
}

/** `createTokengate` over a seeded SQLite store in a temp dir. */
async function wholeProduct(fixtures: Fixtures) {
  const dataDir = mkdtempSync(join(tmpdir(), 'tg-bench-library-'))
  await seedBenchStore(fixtures, dataDir)
  const gate = await createTokengate({
    dataDir,
    rateLimit: process.argv.includes('--no-limits') ? { enabled: false } : UNLIMITED_RATE_LIMITS,
  })
  return {
    gate,
    close: async () => {
      await gate.close()
      rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

const { gate, close } = process.argv.includes('--create-tokengate')
  ? await wholeProduct(fixtures)
  : bareCore(fixtures)
const app = Fastify()
await app.register(tokengate, gate)
app.get('/api/v1/me', async (request) => ({
  subject: request.principal?.subject,
  tenant: request.principal?.tenantId,
}))
app.get('/api/v1/tokens', { config: { permissions: ['tokens:read'] } }, async () => ({
  items: [],
}))
await app.listen({ port: Number(portText), host: '127.0.0.1' })
console.log(`READY ${portText}`)
// An orderly exit on SIGTERM, so `--cpu-prof` (bench/profile.ts) writes its profile and the
// store is flushed and closed.
process.on('SIGTERM', () => void close().then(() => process.exit(0)))
