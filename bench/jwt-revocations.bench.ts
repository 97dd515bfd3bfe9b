/**
 * What JWT revocation rules (issue #34) cost on the cached-JWT path: the verifier's
 * `verifyMaybeSync` (the server's request path) for one cached token, with no rules and with
 * 100,000 live rules of its issuer (25,000 each by jti, sid, sub and tenant, none matching
 * the token: the common case, every request pays the lookups and passes). Two verifiers over
 * the same token, measured in alternating rounds (a shared machine drifts between minutes,
 * not between adjacent rounds), each round's CPU time (not wall time); per round the ratio,
 * and the median of rounds.
 *
 * Run: `./node_modules/.bin/node bench/jwt-revocations.bench.ts [--rounds 40] [--ops 200000]`
 */
import { createMaybeSyncAuthenticator } from '../src/core/authenticate.ts'
import { createJwtVerifier } from '../src/core/jwt.ts'
import { type JwtRevocationKind, JwtRevocationSet } from '../src/core/jwt-revocations.ts'
import type { Tenant } from '../src/core/ports.ts'
import type { AuthInput } from '../src/core/raw-headers.ts'
import { createCachedLookups } from '../src/stores/cached-lookups.ts'
import { createTestIssuer } from '../test/helpers/jwt.ts'
import { readCli } from './cli.ts'
import { median, percentile } from './latency-stats.ts'

const { values } = readCli({
  script: 'bench/jwt-revocations.bench.ts',
  options: {
    rounds: { type: 'number', integer: true, default: 40 },
    ops: { type: 'number', integer: true, default: 200_000 },
  },
})
const ROUNDS = values.rounds
const OPS = values.ops
const RULES = 100_000

const issuer = createTestIssuer({ alg: 'ES256' })
const now = Date.now()
const rules = new JwtRevocationSet()
const kinds: JwtRevocationKind[] = ['jti', 'sid', 'sub', 'tenant']
for (let i = 0; i < RULES; i++) {
  const kind = kinds[i % 4] as JwtRevocationKind
  rules.put({
    id: `r${i}`,
    issuer: issuer.config.issuer,
    kind,
    value: `${kind}-${i}`,
    issuedBefore: kind === 'sub' || kind === 'tenant' ? now : null,
    reason: null,
    createdAt: now,
    createdBy: null,
    expiresAt: now + 86_430_000,
  })
}
const none = createJwtVerifier([issuer.config])
const many = createJwtVerifier([issuer.config], { revocations: rules })
const token = await issuer.sign({ jti: 'bench-jti', sid: 'bench-sid' })
for (const verifier of [none, many]) {
  const first = await verifier.verify(token)
  if (!first.ok) throw new Error(`benchmark token refused: ${JSON.stringify(first.failure)}`)
}

// The same through the core's authenticate (as the server calls it): Authorization parsed,
// the token's kind found, the tenant checked (cached lookups), the principal built.
const tenant: Tenant = { id: 'tenant-a', name: 'Bench', enabled: true, createdAt: 0 }
const lookups = createCachedLookups(
  {
    findPatByHash: async () => undefined,
    findTenant: async (id) => (id === tenant.id ? tenant : undefined),
  },
  // Kept for the whole run: a refetch (every 2 s by default) would answer with a promise.
  { ttlMs: 3_600_000 },
)
const clock = { now: () => Date.now() }
const authNone = createMaybeSyncAuthenticator({ lookups: lookups.maybeSync, jwt: none, clock })
const authMany = createMaybeSyncAuthenticator({ lookups: lookups.maybeSync, jwt: many, clock })
const input: AuthInput = { authorization: [`Bearer ${token}`], tenantIds: [tenant.id] }
for (const authenticate of [authNone, authMany]) {
  const first = await authenticate(input)
  if (!first.ok) throw new Error(`benchmark request refused: ${JSON.stringify(first.failure)}`)
}

/**
 * CPU time (user + system) since `started`, in ns: unlike wall time it leaves out the time
 * other processes of a shared machine held the core.
 */
function cpuNs(started: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(started)
  return (used.user + used.system) * 1000
}

/** ns per cached verification over `OPS` calls. */
function run(verifier: typeof none): number {
  let ok = 0
  const started = process.cpuUsage()
  for (let i = 0; i < OPS; i++) {
    const outcome = verifier.verifyMaybeSync(token)
    if (!(outcome instanceof Promise) && outcome.ok) ok++
  }
  const ns = cpuNs(started) / OPS
  if (ok !== OPS) throw new Error('a cached verification was not answered synchronously and ok')
  return ns
}

/** ns per authenticated cached-JWT request over `OPS` calls. */
function runAuth(authenticate: typeof authNone): number {
  let ok = 0
  const started = process.cpuUsage()
  for (let i = 0; i < OPS; i++) {
    const result = authenticate(input)
    if (!(result instanceof Promise) && result.ok) ok++
  }
  const ns = cpuNs(started) / OPS
  if (ok !== OPS) throw new Error('a cached request was not answered synchronously and allowed')
  return ns
}

const pct = (x: number) => `${x >= 1 ? '+' : ''}${((x - 1) * 100).toFixed(1)} %`

/** Alternating rounds of `base` and `rules` (which goes first alternates too). */
function compare(what: string, base: () => number, rules: () => number) {
  for (let i = 0; i < 3; i++) {
    base()
    rules()
  }
  const baseNs: number[] = []
  const rulesNs: number[] = []
  for (let round = 0; round < ROUNDS; round++) {
    if (round % 2 === 0) {
      baseNs.push(base())
      rulesNs.push(rules())
    } else {
      rulesNs.push(rules())
      baseNs.push(base())
    }
  }
  const ratios = baseNs.map((n, i) => (rulesNs[i] as number) / n).sort((x, y) => x - y)
  // The minimum over rounds is the cost least disturbed by other processes on a shared machine.
  return {
    path: what,
    'none ns/op (median / min)': `${Math.round(median(baseNs))} / ${Math.round(Math.min(...baseNs))}`,
    '100k rules ns/op (median / min)': `${Math.round(median(rulesNs))} / ${Math.round(Math.min(...rulesNs))}`,
    'min vs min': pct(Math.min(...rulesNs) / Math.min(...baseNs)),
    'per round: median (p10, p90)': `${pct(median(ratios))} (${pct(percentile(ratios, 10))}, ${pct(percentile(ratios, 90))})`,
  }
}

console.log(
  `Node ${process.version}, ${ROUNDS} rounds x ${OPS} cached requests per case, ${RULES.toLocaleString('en')} rules (none matching)`,
)
console.table([
  compare(
    'verifyMaybeSync (cached)',
    () => run(none),
    () => run(many),
  ),
  compare(
    'authenticate (cached JWT)',
    () => runAuth(authNone),
    () => runAuth(authMany),
  ),
])
none.close()
many.close()
