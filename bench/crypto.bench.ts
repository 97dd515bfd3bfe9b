/**
 * The crypto ceiling: signature verifications per second on one core, in a tight loop, with
 * the verifier's own prepared checks (node:crypto, a prepared KeyObject per key; the same
 * functions the production verifier calls). The load benchmark derives from it the rate a
 * server could reach if auth cost nothing but one verification: 1 / (no-auth cost + verify).
 *
 * Run: `node bench/crypto.bench.ts` (a table) or `--json`; `--quick` measures 0.3 s per
 * algorithm instead of 1 s.
 */
import { Buffer } from 'node:buffer'
import { decodeBase64url } from '../src/core/jwt-jws.ts'
import { bindJwk, bindSecret } from '../src/core/jwt-keys.ts'
import { readCli } from './cli.ts'
import { BENCH_ALGORITHMS, loadFixtures } from './fixtures.ts'

const { values } = readCli({
  script: 'bench/crypto.bench.ts',
  options: { json: { type: 'boolean' }, quick: { type: 'boolean' } },
})
const json = values.json
const budgetMs = values.quick ? 300 : 1000
const fixtures = loadFixtures()
const rates: Record<string, number> = {}
for (const alg of BENCH_ALGORITHMS) {
  const entry = fixtures.algs[alg]
  const key =
    alg === 'HS256'
      ? bindSecret(entry.secret as string, alg)
      : bindJwk(entry.publicJwk as Record<string, unknown>)
  const token = entry.single
  const dot = token.lastIndexOf('.')
  const data = Buffer.from(token.slice(0, dot), 'latin1')
  const signature = decodeBase64url(token.slice(dot + 1)) as Buffer
  if (!key.verify(data, signature)) throw new Error(`${alg}: fixture signature does not verify`)
  for (let i = 0; i < 200; i++) key.verify(data, signature)
  let count = 0
  const start = performance.now()
  while (performance.now() - start < budgetMs) {
    for (let i = 0; i < 20; i++) key.verify(data, signature)
    count += 20
  }
  rates[alg] = (count * 1000) / (performance.now() - start)
}
if (json) console.log(JSON.stringify(rates))
else
  console.table(
    Object.entries(rates).map(([alg, rate]) => ({ alg, 'verifies/s': Math.round(rate) })),
  )
