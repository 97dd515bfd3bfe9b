/**
 * JWT verification cost, in microseconds per verification, per algorithm:
 * - cold: every token distinct, so every verification checks a signature (and fills the
 *   cache, as in production);
 * - cached: one token verified repeatedly (a SHA-256 and a map lookup).
 *
 * Run: `./node_modules/.bin/node bench/jwt.bench.ts` (prints a table).
 */
import { createJwtVerifier } from '../src/core/jwt.ts'
import { createTestIssuer, type TestAlgorithm } from '../test/helpers/jwt.ts'

const ALGORITHMS: TestAlgorithm[] = ['RS256', 'ES256', 'EdDSA', 'HS256']
const COLD_TOKENS = 2000
const CACHED_ROUNDS = 200_000

async function measure(alg: TestAlgorithm) {
  const issuer = createTestIssuer({ alg })
  const verifier = createJwtVerifier([issuer.config], { cacheMaxEntries: COLD_TOKENS * 2 })
  const tokens = await Promise.all(
    Array.from({ length: COLD_TOKENS + 200 }, (_, i) => issuer.sign({ jti: `t${i}` })),
  )
  for (const token of tokens.slice(COLD_TOKENS)) await expectOk(verifier.verify(token))
  let started = performance.now()
  for (const token of tokens.slice(0, COLD_TOKENS)) await expectOk(verifier.verify(token))
  const coldUs = ((performance.now() - started) * 1000) / COLD_TOKENS

  const token = tokens[0] as string
  for (let i = 0; i < 10_000; i++) await verifier.verify(token)
  started = performance.now()
  for (let i = 0; i < CACHED_ROUNDS; i++) await expectOk(verifier.verify(token))
  const cachedUs = ((performance.now() - started) * 1000) / CACHED_ROUNDS
  verifier.close()
  return { alg, 'cold µs/op': round(coldUs), 'cached µs/op': round(cachedUs) }
}

async function expectOk(outcome: ReturnType<ReturnType<typeof createJwtVerifier>['verify']>) {
  const result = await outcome
  if (!result.ok) throw new Error(`benchmark token refused: ${JSON.stringify(result.failure)}`)
}

const round = (n: number) => Math.round(n * 100) / 100

const rows = []
for (const alg of ALGORITHMS) rows.push(await measure(alg))
console.log(`Node ${process.version}, ${COLD_TOKENS} cold tokens, ${CACHED_ROUNDS} cached rounds`)
console.table(rows)
