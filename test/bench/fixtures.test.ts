/**
 * The load benchmark measures what its table says only if its tokens are what the case names
 * claim: every pooled JWT verifies with the production verifier (so "distinct" cases measure
 * signature checks, not 401s), the pools hold distinct tokens, the PATs match their stored
 * records, and the rejection cases fail for the named reason.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import {
  BENCH_ALGORITHMS,
  BENCH_TENANT,
  benchIssuers,
  freshJwtPool,
  loadFixtures,
  readPatRecords,
} from '../../bench/fixtures.ts'
import { createJwtVerifier } from '../../src/core/jwt.ts'
import { checkPatFormat, hashPat } from '../../src/core/pat.ts'

const dir = mkdtempSync(join(tmpdir(), 'tg-bench-fixtures-'))
after(() => rmSync(dir, { recursive: true, force: true }))
const fixtures = loadFixtures(dir, 25)
const lines = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean)

test('every pooled and single JWT verifies, for its tenant, and the pools hold distinct tokens', async () => {
  const verifier = createJwtVerifier(benchIssuers(fixtures), { cacheMaxEntries: 0 })
  for (const alg of BENCH_ALGORITHMS) {
    const pool = lines(fixtures.algs[alg].poolFile)
    assert.equal(pool.length, 25)
    assert.equal(new Set(pool).size, pool.length)
    for (const token of [...pool, fixtures.algs[alg].single]) {
      const outcome = await verifier.verify(token)
      if (!outcome.ok) assert.fail(`${alg}: ${JSON.stringify(outcome.failure)}`)
      assert.equal(outcome.jwt.tenantId, BENCH_TENANT)
      assert.deepEqual(outcome.jwt.permissions, ['tokens:read'])
    }
  }
  const forbidden = await verifier.verify(fixtures.forbiddenJwt)
  assert.ok(forbidden.ok && forbidden.jwt.permissions.length === 0)
  verifier.close()
})

test('fresh JWTs verify, appear in no other fixture, and the file only grows', async () => {
  const verifier = createJwtVerifier(benchIssuers(fixtures), { cacheMaxEntries: 0 })
  const first = lines(freshJwtPool(fixtures, 'RS256', 3))
  assert.equal(first.length, 3)
  const grown = lines(freshJwtPool(fixtures, 'RS256', 5))
  assert.deepEqual(grown.slice(0, 3), first)
  assert.equal(lines(freshJwtPool(fixtures, 'RS256', 4)).length, 5)
  const elsewhere = new Set([...lines(fixtures.algs.RS256.poolFile), fixtures.algs.RS256.single])
  assert.equal(new Set(grown).size, 5)
  for (const token of grown) {
    assert.ok(!elsewhere.has(token))
    const outcome = await verifier.verify(token)
    if (!outcome.ok) assert.fail(JSON.stringify(outcome.failure))
    assert.equal(outcome.jwt.tenantId, BENCH_TENANT)
  }
  verifier.close()
})

test('PATs are well-formed and stored; the rejection cases fail for their named reason', () => {
  const stored = new Map(readPatRecords(fixtures).map((r) => [r.tokenHash, r]))
  const pool = lines(fixtures.patPoolFile)
  assert.equal(new Set(pool).size, 25)
  for (const token of [...pool, fixtures.patSingle, fixtures.patForbidden]) {
    assert.deepEqual(checkPatFormat(token), { ok: true })
    assert.equal(stored.get(hashPat(token))?.tenantId, BENCH_TENANT)
  }
  assert.deepEqual(stored.get(hashPat(fixtures.patForbidden))?.permissions, [])
  assert.deepEqual(checkPatFormat(fixtures.patBadChecksum), { ok: false, reason: 'bad_checksum' })
  assert.deepEqual(checkPatFormat(fixtures.patGarbage), { ok: false, reason: 'malformed' })
})

test('the bench starts tokengate with the flags production starts with', async () => {
  const { PRODUCTION_NODE_FLAGS } = await import('../../bench/load.ts')
  const root = new URL('../../', import.meta.url)
  const shebang = readFileSync(new URL('bin/tokengate.js', root), 'utf8').split('\n')[0] ?? ''
  assert.deepEqual(shebang.split(' ').slice(3), PRODUCTION_NODE_FLAGS)
  const start = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')).scripts.start
  assert.ok(start.startsWith(`node ${PRODUCTION_NODE_FLAGS.join(' ')} bin/tokengate.js`), start)
})
