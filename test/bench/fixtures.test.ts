/**
 * The load benchmark measures what its table says only if its tokens are what the case names
 * claim: every pooled JWT verifies with the production verifier (so "distinct" cases measure
 * signature checks, not 401s), the pools hold distinct tokens, the PATs match their stored
 * records, and the rejection cases fail for the named reason.
 */
import assert from 'node:assert/strict'
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import {
  BENCH_ALGORITHMS,
  BENCH_TENANT,
  benchIssuers,
  type Fixtures,
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

/** Every file a run reads after loading its fixtures, by path, with its text. */
const filesOf = (loaded: Fixtures) =>
  Object.fromEntries(
    [
      ...BENCH_ALGORITHMS.map((alg) => loaded.algs[alg].poolFile),
      loaded.patPoolFile,
      loaded.patQuotaPoolFile,
      loaded.patRecordsFile,
    ].map((file) => [file, readFileSync(file, 'utf8')]),
  )

test('a run that regenerates the shared fixtures leaves another run on the ones it loaded', () => {
  // Two benches on one machine share the fixtures directory. Run A loads the fixtures and
  // starts its servers, each of which loads them again from `fixtures.dir`, while wrk and the
  // servers read the pool and record files. Run B, started when the tokens are past their
  // half-life, regenerates them: nothing A reads may change under it.
  const shared = mkdtempSync(join(tmpdir(), 'tg-bench-fixtures-shared-'))
  try {
    const a = loadFixtures(shared, 5)
    const aFiles = filesOf(a)
    const index = join(shared, 'fixtures.json')
    const openIndex = openSync(index, 'r')
    const aIndexText = readFileSync(index, 'utf8')
    writeFileSync(index, JSON.stringify({ ...JSON.parse(aIndexText), createdSec: 0 }))
    const agedIndexText = readFileSync(index, 'utf8')
    const b = loadFixtures(shared, 5)
    assert.notEqual(b.patSingle, a.patSingle, 'B regenerated')
    assert.deepEqual(loadFixtures(shared, 5), b, 'later runs take the new ones')
    assert.deepEqual(filesOf(a), aFiles, "A's files are as A loaded them")
    assert.deepEqual(loadFixtures(a.dir, 5), a, "A's servers load A's fixtures")
    // A reader that opened the index before B published its own reads it whole and unchanged:
    // the index is replaced, never truncated and rewritten under a reader.
    assert.equal(readFileSync(openIndex, 'utf8'), agedIndexText)
    closeSync(openIndex)
  } finally {
    rmSync(shared, { recursive: true, force: true })
  }
})

test('the fresh JWT file grows by replacement: a reader never sees it half-appended', () => {
  const file = freshJwtPool(fixtures, 'ES256', 2)
  const opened = openSync(file, 'r')
  const before = readFileSync(file, 'utf8')
  assert.equal(lines(freshJwtPool(fixtures, 'ES256', 4)).length, 4)
  assert.equal(readFileSync(opened, 'utf8'), before)
  closeSync(opened)
})

test('a regeneration removes the generations whose tokens have all expired, and no other', () => {
  const shared = mkdtempSync(join(tmpdir(), 'tg-bench-fixtures-expired-'))
  try {
    const live = loadFixtures(shared, 5)
    const expired = join(shared, 'generation-1000-abcdef')
    mkdirSync(expired)
    const index = join(shared, 'fixtures.json')
    writeFileSync(
      index,
      JSON.stringify({ ...JSON.parse(readFileSync(index, 'utf8')), createdSec: 0 }),
    )
    loadFixtures(shared, 5)
    assert.ok(!existsSync(expired))
    assert.deepEqual(loadFixtures(live.dir, 5), live)
  } finally {
    rmSync(shared, { recursive: true, force: true })
  }
})
