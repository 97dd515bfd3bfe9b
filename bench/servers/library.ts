/**
 * tokengate in library mode, as an application embeds it: a Fastify app with
 * `tokengate/fastify` over the public `createAuthenticator`, PATs and the tenant in memory (no
 * store, no rate limiting, no audit), the node:crypto JWT verifier over the bench issuers.
 * Answers the peers' routes: `GET /api/v1/me` (any valid token) and `GET /api/v1/tokens`
 * (`tokens:read`).
 *
 * Usage: node bench/servers/library.ts <fixturesDir> <port>
 */
import Fastify from 'fastify'
import { tokengate } from '../../src/adapters/fastify.ts'
import {
  createAuthenticator,
  createJwtVerifier,
  type PatRecord,
  type Tenant,
} from '../../src/index.ts'
import { BENCH_TENANT, benchIssuers, loadFixtures, readPatRecords } from '../fixtures.ts'

const [fixturesDir, portText] = process.argv.slice(2)
const fixtures = loadFixtures(fixturesDir)
const pats = new Map<string, PatRecord>(readPatRecords(fixtures).map((r) => [r.tokenHash, r]))
const tenant: Tenant = { id: BENCH_TENANT, name: 'Bench', enabled: true, createdAt: 0 }
const authenticate = createAuthenticator({
  lookups: {
    findPatByHash: (hash) => pats.get(hash),
    findTenant: (id) => (id === BENCH_TENANT ? tenant : undefined),
  },
  jwt: createJwtVerifier(benchIssuers(fixtures)),
  clock: { now: () => Date.now() },
})

const app = Fastify()
await app.register(tokengate, { authenticate, prefix: '/api/v1/' })
app.get('/api/v1/me', async (request) => ({
  subject: request.principal?.subject,
  tenant: request.principal?.tenantId,
}))
app.get('/api/v1/tokens', { config: { permissions: ['tokens:read'] } }, async () => ({
  items: [],
}))
await app.listen({ port: Number(portText), host: '127.0.0.1' })
console.log(`READY ${portText}`)
// An orderly exit on SIGTERM, so `--cpu-prof` (bench/profile.ts) writes its profile.
process.on('SIGTERM', () => process.exit(0))
