/**
 * The core's `authenticate` per case, in ns/op, in-process: the production pieces (cached
 * lookups over an in-memory store, the node:crypto JWT verifier with its cache) without
 * HTTP. Distinct pools of 10,000 tokens cycle so that the JWT cache never hits.
 *
 * Run: `node bench/authenticate.bench.ts` (a table) or `--json`; `--quick` for a shorter run;
 * `--cases REGEX` for some cases only (e.g. under `node --cpu-prof`).
 */
import { readFileSync } from 'node:fs'
import { createAuthenticator } from '../src/core/authenticate.ts'
import { createJwtVerifier } from '../src/core/jwt.ts'
import type { PatRecord, Tenant } from '../src/core/ports.ts'
import type { AuthInput } from '../src/core/raw-headers.ts'
import { createCachedLookups } from '../src/stores/cached-lookups.ts'
import { readCli } from './cli.ts'
import {
  BENCH_ALGORITHMS,
  BENCH_TENANT,
  benchIssuers,
  loadFixtures,
  readPatRecords,
} from './fixtures.ts'

const { values } = readCli({
  script: 'bench/authenticate.bench.ts',
  options: { json: { type: 'boolean' }, quick: { type: 'boolean' }, cases: { type: 'regex' } },
})
const json = values.json
const budgetMs = values.quick ? 150 : 1000
const only = values.cases
const fixtures = loadFixtures()

const pats = new Map<string, PatRecord>(readPatRecords(fixtures).map((r) => [r.tokenHash, r]))
const tenant: Tenant = { id: BENCH_TENANT, name: 'Bench', enabled: true, createdAt: 0 }
const lookups = createCachedLookups({
  findPatByHash: async (hash) => pats.get(hash),
  findTenant: async (id) => (id === BENCH_TENANT ? tenant : undefined),
})
const verifier = createJwtVerifier(benchIssuers(fixtures))
const authenticate = createAuthenticator({
  lookups,
  jwt: verifier,
  clock: { now: () => Date.now() },
})

const lines = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean)
const input = (token: string, tenantIds: string[] = []): AuthInput => ({
  authorization: [`Bearer ${token}`],
  tenantIds,
})

const cases: [string, AuthInput[], boolean][] = [
  ['PAT single', [input(fixtures.patSingle)], true],
  ['PAT distinct (10k)', lines(fixtures.patPoolFile).map((t) => input(t)), true],
  ['401 garbage', [input(fixtures.patGarbage)], false],
  ['401 bad checksum', [input(fixtures.patBadChecksum)], false],
  ['JWT RS256 wrong X-Tenant-Id', [input(fixtures.algs.RS256.single, ['other'])], false],
]
for (const alg of BENCH_ALGORITHMS) {
  const entry = fixtures.algs[alg]
  cases.push([`JWT ${alg} single`, [input(entry.single, [BENCH_TENANT])], true])
  cases.push([
    `JWT ${alg} distinct (10k)`,
    lines(entry.poolFile).map((t) => input(t, [BENCH_TENANT])),
    true,
  ])
}

const results: Record<string, number> = {}
for (const [name, inputs, ok] of cases) {
  if (only && !only.test(name)) continue
  for (let i = 0; i < Math.min(inputs.length, 200); i++) {
    const result = await authenticate(inputs[i] as AuthInput)
    if (result.ok !== ok) throw new Error(`${name}: unexpected ${JSON.stringify(result)}`)
  }
  let count = 0
  let at = 200 % inputs.length
  const start = performance.now()
  while (performance.now() - start < budgetMs) {
    for (let i = 0; i < 50; i++) {
      await authenticate(inputs[at] as AuthInput)
      at = (at + 1) % inputs.length
    }
    count += 50
  }
  results[name] = Math.round(((performance.now() - start) * 1e6) / count)
}
verifier.close()
if (json) console.log(JSON.stringify(results))
else console.table(Object.entries(results).map(([name, ns]) => ({ case: name, 'ns/op': ns })))
