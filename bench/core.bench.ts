/**
 * Micro-benchmarks of the auth core's hot paths. A plain script, not part of the test suite:
 *
 *     ./node_modules/.bin/node bench/core.bench.ts
 *
 * Add a case with `await measure('name', () => work(), iterations)`; `fn` may be sync or
 * return a promise (each call is awaited, so async cases include one microtask hop).
 */
import { createAuthenticator } from '../src/core/authenticate.ts'
import { parseAuthorization } from '../src/core/credentials.ts'
import { issuePat } from '../src/core/pat.ts'
import type { AuthLookups, JwtVerifier, PatRecord, Tenant } from '../src/core/ports.ts'

/** Runs `fn` for a warm-up then `iterations` times; prints ns/op and µs/op. */
export async function measure(
  name: string,
  fn: () => unknown,
  iterations = 200_000,
): Promise<{ name: string; nsPerOp: number }> {
  const run = async (count: number) => {
    for (let i = 0; i < count; i++) {
      const result = fn()
      if (result instanceof Promise) await result
    }
  }
  await run(Math.min(10_000, iterations))
  const start = process.hrtime.bigint()
  await run(iterations)
  const nsPerOp = Number(process.hrtime.bigint() - start) / iterations
  console.log(
    `${name.padEnd(44)} ${nsPerOp.toFixed(0).padStart(8)} ns/op ${(nsPerOp / 1000).toFixed(3).padStart(9)} µs/op`,
  )
  return { name, nsPerOp }
}

const now = Date.now()
const { token, record } = issuePat({
  tenantId: 'acme',
  subject: 'bench',
  name: 'bench',
  permissions: ['tokens:read'],
  expiresAt: now + 86_400_000,
  now,
})
const pats = new Map<string, PatRecord>([[record.tokenHash, record]])
const tenants = new Map<string, Tenant>([
  ['acme', { id: 'acme', name: 'Acme', enabled: true, createdAt: now }],
])
const lookups: AuthLookups = {
  findPatByHash: async (hash) => pats.get(hash),
  findTenant: async (id) => tenants.get(id),
}
let storeCalls = 0
const countingLookups: AuthLookups = {
  findPatByHash: async (hash) => {
    storeCalls++
    return pats.get(hash)
  },
  findTenant: async (id) => tenants.get(id),
}
const noJwt: JwtVerifier = {
  verify: async () => {
    throw new Error('the PAT benchmarks never reach the JWT verifier')
  },
  close() {},
}
const clock = { now: () => now }
const authenticate = createAuthenticator({ lookups, jwt: noJwt, clock })
const authenticateCounting = createAuthenticator({ lookups: countingLookups, jwt: noJwt, clock })

const header = [`Bearer ${token}`]
const valid = { authorization: header, tenantIds: [] }
const last = token.at(-1) === 'A' ? 'B' : 'A'
const garbage = { authorization: [`Bearer ${token.slice(0, -1)}${last}`], tenantIds: [] }

const check = await authenticate(valid)
if (!check.ok) throw new Error('benchmark setup: the PAT does not authenticate')

console.log(`node ${process.version}, ${process.arch}`)
await measure('parseAuthorization', () => parseAuthorization(header), 1_000_000)
await measure('authenticate: valid PAT (in-memory Map lookup)', () => authenticate(valid))
await measure('authenticate: garbage PAT (bad checksum)', () => authenticateCounting(garbage))
if (storeCalls !== 0) throw new Error('garbage PATs reached the store')
