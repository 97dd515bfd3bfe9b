/**
 * Issue #36: `createTokengate`'s `gate.check` for one bench credential (`--case`: the PAT, the
 * repeated ES256 JWT, or the garbage PAT run.ts's `401 garbage` sends), in one process, this tree
 * against an earlier one: no Fastify, no sockets, only the gate's steps (digest, lookups,
 * limits, recorder). The two gates run in alternating rounds (which goes first alternates
 * too), a turn of the event loop between rounds so that the change feed and the writes
 * behind run as served; printed: ns per check of each (median of rounds), the paired
 * difference (median of per-round differences), and heap bytes allocated per check (a batch
 * between two collections; run with `--max-semi-space-size=64` so that no scavenge runs in it).
 * Modules of the two trees are apart, but the first tree loaded reads a few tens of ns
 * slower or faster: run both orders and take the two differences together.
 *
 * Usage: node --expose-gc --max-semi-space-size=64 bench/library-gate-ab.ts BASELINE_DIR
 *        [--rounds 120] [--checks 10000] [--first this|baseline] [--case pat|es256|garbage]
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { getHeapStatistics } from 'node:v8'
import { readCli } from './cli.ts'
import { BENCH_TENANT, loadFixtures, seedBenchStore, UNLIMITED_RATE_LIMITS } from './fixtures.ts'
import { median } from './latency-stats.ts'

const { values, positionals } = readCli({
  script: 'bench/library-gate-ab.ts',
  positionals: ['BASELINE_DIR'],
  options: {
    rounds: { type: 'number', integer: true, default: 120 },
    checks: { type: 'number', integer: true, default: 10_000 },
    first: { type: 'choice', choices: ['this', 'baseline'], default: 'this' },
    case: { type: 'choice', choices: ['pat', 'es256', 'garbage'], default: 'pat' },
  },
})
const baseline = positionals[0] as string
const ROUNDS = values.rounds
const CHECKS = values.checks
const here = resolve(import.meta.dirname, '..')
const trees = values.first === 'this' ? [here, resolve(baseline)] : [resolve(baseline), here]
const gc = (globalThis as { gc?: () => void }).gc
if (!gc) throw new Error('run with --expose-gc')

const fixtures = loadFixtures()
// The token and X-Tenant-Id of each case, as run.ts sends them.
const cases: Record<typeof values.case, { token: string; tenantIds: string[] }> = {
  pat: { token: fixtures.patSingle, tenantIds: [] },
  es256: { token: fixtures.algs.ES256.single, tenantIds: [BENCH_TENANT] },
  garbage: { token: fixtures.patGarbage, tenantIds: [] },
}
const CASE = values.case
const credential = cases[CASE]
interface Checker {
  check(request: object): unknown
  close(): Promise<void>
}
const gates: Checker[] = []
const dataDirs: string[] = []
for (const tree of trees) {
  const index = await import(join(tree, 'src/index.ts'))
  const dataDir = mkdtempSync(join(tmpdir(), 'tg-library-gate-ab-'))
  dataDirs.push(dataDir)
  await seedBenchStore(fixtures, dataDir)
  gates.push(
    await index.createTokengate({
      dataDir,
      rateLimit: UNLIMITED_RATE_LIMITS,
    }),
  )
}
const request = {
  method: 'GET',
  target: '/api/v1/me',
  authorization: [`Bearer ${credential.token}`],
  tenantIds: credential.tenantIds,
  clientAddress: '127.0.0.1',
  requestId: 'req-1',
  access: { permissions: [] },
}
const turn = () => new Promise((done) => setImmediate(done))
const timed = (gate: Checker): number => {
  const started = process.hrtime.bigint()
  for (let i = 0; i < CHECKS; i++) gate.check(request)
  return Number(process.hrtime.bigint() - started) / CHECKS
}
const allocated = (gate: Checker): number => {
  gc()
  const before = getHeapStatistics().used_heap_size
  for (let i = 0; i < 5_000; i++) gate.check(request)
  return (getHeapStatistics().used_heap_size - before) / 5_000
}

// Every cache filled and both gates optimized before the first timed round; each gate's
// answer printed, so that a case that stopped answering as run.ts's does is seen.
const answers: string[] = []
for (const gate of gates) {
  const outcome = (await gate.check(request)) as { allowed: boolean; status?: number }
  answers.push(outcome.allowed ? 'allowed' : String(outcome.status))
}
for (let i = 0; i < 20; i++) {
  for (const gate of gates) timed(gate)
  await turn()
}
const mine = trees.indexOf(here)
const ns: [number[], number[]] = [[], []]
const differences: number[] = []
for (let round = 0; round < ROUNDS; round++) {
  const first = round % 2
  const took = [0, 0]
  took[first] = timed(gates[first] as Checker)
  await turn()
  took[1 - first] = timed(gates[1 - first] as Checker)
  await turn()
  ns[0].push(took[0] as number)
  ns[1].push(took[1] as number)
  differences.push((took[mine] as number) - (took[1 - mine] as number))
}
const bytes = gates.map((gate) => median([0, 1, 2, 3, 4, 5, 6].map(() => allocated(gate))))
console.log(`${CASE}: ${ROUNDS} alternating rounds x ${CHECKS} checks, loaded first: ${trees[0]}`)
console.log(`answers: ${answers.join(', ')}`)
console.log('| tree | ns/check | B/check |')
console.log('|---|---:|---:|')
trees.forEach((tree, i) => {
  console.log(
    `| ${tree} | ${median(ns[i as 0 | 1]).toFixed(0)} | ${(bytes[i] as number).toFixed(0)} |`,
  )
})
console.log(`this tree - baseline, paired median: ${median(differences).toFixed(0)} ns/check`)
for (const gate of gates) await gate.close()
for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true })
