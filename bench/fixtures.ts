/**
 * Benchmark fixtures: one key per algorithm, token pools (single and 10,000 distinct JWTs per
 * algorithm, PATs), and the files servers and wrk read. Signing 10,000 RS256 tokens takes
 * seconds, so fixtures are cached in a directory and reused while their tokens stay valid.
 *
 * Benches running at once share that directory, so its files are never rewritten: each
 * generation is written into its own subdirectory, then published by renaming the index over
 * the old one. A run keeps reading the generation it loaded, and its servers, handed
 * `fixtures.dir` (the generation's directory), load exactly that one, whoever regenerates.
 */
import { Buffer } from 'node:buffer'
import { createPrivateKey, generateKeyPairSync, type KeyObject, randomBytes } from 'node:crypto'
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join, resolve } from 'node:path'
import type { IssuerConfig } from '../src/core/issuer.ts'
import { issuePat } from '../src/core/pat.ts'
import type { PatRecord } from '../src/core/ports.ts'
import { openStore } from '../src/stores/open-store.ts'
import type { SqliteStore } from '../src/stores/sqlite.ts'
import { signCompact } from '../test/helpers/jwt.ts'

export const BENCH_ALGORITHMS = ['RS256', 'ES256', 'EdDSA', 'HS256'] as const
export type BenchAlgorithm = (typeof BENCH_ALGORITHMS)[number]

export const BENCH_TENANT = 'bench-tenant'
export const BENCH_AUDIENCE = 'tokengate'
export const POOL_SIZE = 10_000
/** PATs with a quota (the slow-disk bench's quota rows). */
export const QUOTA_POOL = 1000
/** Fixture tokens live this long; fixtures are regenerated when less than half remains. */
const LIFETIME_SEC = 20 * 3600
const FORMAT = 4

/**
 * Limits a bench server lifts: its load is one token (or a few) over every connection, which
 * the rate limits and the gateway's per-token and per-tenant in-flight caps (fairness
 * defences) would answer with 429s, measuring the refusal instead of the request.
 */
export const UNLIMITED_RATE_LIMITS = {
  perToken: { max: 1_000_000_000, windowSec: 60 },
  perTenant: { max: 1_000_000_000, windowSec: 60 },
  failedAuth: { max: 1_000_000_000, windowSec: 60 },
}
export const UNLIMITED_IN_FLIGHT = {
  maxInFlightPerToken: 1_000_000,
  maxInFlightPerTenant: 1_000_000,
}

export const issuerOf = (alg: string) => `https://bench-${alg.toLowerCase()}.test`

/** Everything a server or a load generator needs, as plain JSON. */
export interface Fixtures {
  readonly format: number
  readonly createdSec: number
  readonly poolSize: number
  readonly dir: string
  /** Per algorithm: the public JWK (or base64url secret for HS256) and token files. */
  readonly algs: Record<
    BenchAlgorithm,
    {
      readonly publicJwk?: Record<string, unknown>
      readonly publicPem?: string
      /** HS256: the secret as base64url (tokengate's `secret` key source). */
      readonly secret?: string
      /** HS256: the same secret as the text whose UTF-8 bytes it is (what the peers take). */
      readonly secretText?: string
      readonly single: string
      /** File with one token per line. */
      readonly poolFile: string
    }
  >
  /** A JWT (RS256) without the permission the 403 route requires. */
  readonly forbiddenJwt: string
  readonly patSingle: string
  readonly patPoolFile: string
  /** File of QUOTA_POOL PATs each with a monthly quota (never spent), one per line. */
  readonly patQuotaPoolFile: string
  /** File of PAT records (JSON lines) to seed a store with. */
  readonly patRecordsFile: string
  /** A PAT without `tokens:read`, for the 403 case. */
  readonly patForbidden: string
  readonly patGarbage: string
  readonly patBadChecksum: string
}

export function fixturesDir(): string {
  return join(tmpdir(), 'tokengate-bench-fixtures')
}

const INDEX = 'fixtures.json'
const GENERATION_PREFIX = 'generation-'

/**
 * Loads cached fixtures, or generates them (a few seconds, RS256 signing dominates). `dir` is
 * the shared directory, or a generation's own (`fixtures.dir`, what a bench hands its servers):
 * that one is loaded as is, so that the servers hold the tokens their load generator sends.
 */
export function loadFixtures(dir = fixturesDir(), poolSize = POOL_SIZE): Fixtures {
  const root = resolve(dir)
  const nowSec = Math.floor(Date.now() / 1000)
  const cached = readIndex(join(root, INDEX))
  if (cached?.format === FORMAT) {
    if (cached.dir === root && basename(root).startsWith(GENERATION_PREFIX)) return cached
    const fresh = nowSec - cached.createdSec < LIFETIME_SEC / 2
    if (cached.poolSize === poolSize && fresh) return cached
  }
  mkdirSync(root, { recursive: true })
  removeExpiredGenerations(root, nowSec)
  const generation = mkdtempSync(join(root, `${GENERATION_PREFIX}${nowSec}-`))
  const fixtures = generate(generation, nowSec, poolSize)
  writeFileSync(join(generation, INDEX), JSON.stringify(fixtures))
  replaceFile(join(root, INDEX), JSON.stringify(fixtures))
  return fixtures
}

const readIndex = (file: string) =>
  existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Fixtures) : undefined

/** Writes `file` whole under a private name, then renames it into place: readers see either. */
function replaceFile(file: string, text: string): void {
  const partial = `${file}.${process.pid}-${randomBytes(4).toString('hex')}.partial`
  writeFileSync(partial, text)
  renameSync(partial, file)
}

/** Generations whose tokens have all expired (`generation-<createdSec>-…`): no run can use them. */
function removeExpiredGenerations(root: string, nowSec: number): void {
  for (const name of readdirSync(root)) {
    if (!name.startsWith(GENERATION_PREFIX)) continue
    const createdSec = Number(name.slice(GENERATION_PREFIX.length).split('-')[0])
    if (nowSec - createdSec >= LIFETIME_SEC)
      rmSync(join(root, name), { recursive: true, force: true })
  }
}

function keyPair(alg: BenchAlgorithm): { privateKey: KeyObject; publicKey: KeyObject } {
  if (alg === 'RS256') return generateKeyPairSync('rsa', { modulusLength: 2048 })
  if (alg === 'ES256') return generateKeyPairSync('ec', { namedCurve: 'P-256' })
  return generateKeyPairSync('ed25519')
}

/** The claims of every bench JWT of `alg` issued at `nowSec`, plus `extra`. */
function benchClaims(alg: string, nowSec: number, extra: Record<string, unknown> = {}) {
  return {
    iss: issuerOf(alg),
    aud: BENCH_AUDIENCE,
    sub: 'bench-user',
    tenant_id: BENCH_TENANT,
    permissions: ['tokens:read'],
    iat: nowSec,
    exp: nowSec + LIFETIME_SEC,
    ...extra,
  }
}

const benchJwtHeader = (alg: BenchAlgorithm) =>
  alg === 'HS256' ? { alg, typ: 'JWT' } : { alg, typ: 'JWT', kid: `${alg.toLowerCase()}-bench` }
const privateKeyFile = (dir: string, alg: BenchAlgorithm) => join(dir, `${alg}-private.pem`)
const freshPoolFile = (dir: string, alg: BenchAlgorithm) => join(dir, `jwt-${alg}-fresh.txt`)

function generate(dir: string, nowSec: number, poolSize: number): Fixtures {
  const claims = (alg: string, extra: Record<string, unknown> = {}) =>
    benchClaims(alg, nowSec, extra)
  const algs = {} as Record<BenchAlgorithm, Fixtures['algs'][BenchAlgorithm]>
  let forbiddenJwt = ''
  for (const alg of BENCH_ALGORITHMS) {
    let signingKey: KeyObject | Uint8Array
    let entry: Omit<Fixtures['algs'][BenchAlgorithm], 'single' | 'poolFile'>
    if (alg === 'HS256') {
      // A text secret, because hono/jwt and jsonwebtoken take a string's UTF-8 bytes.
      const secretText = randomBytes(32).toString('base64url')
      signingKey = Buffer.from(secretText)
      entry = { secret: Buffer.from(secretText).toString('base64url'), secretText }
    } else {
      const pair = keyPair(alg)
      signingKey = pair.privateKey
      // Kept (bench fixtures only) so freshJwtPool can sign more tokens later.
      writeFileSync(
        privateKeyFile(dir, alg),
        pair.privateKey.export({ format: 'pem', type: 'pkcs8' }),
        { mode: 0o600 },
      )
      entry = {
        publicJwk: {
          ...(pair.publicKey.export({ format: 'jwk' }) as object),
          kid: benchJwtHeader(alg).kid,
          alg,
          use: 'sig',
        },
        publicPem: pair.publicKey.export({ format: 'pem', type: 'spki' }).toString(),
      }
    }
    const header = benchJwtHeader(alg)
    const pool = Array.from({ length: poolSize }, (_, i) =>
      signCompact(header, claims(alg, { jti: `${alg}-${i}` }), signingKey),
    )
    const poolFile = join(dir, `jwt-${alg}.txt`)
    writeFileSync(poolFile, `${pool.join('\n')}\n`)
    const single = signCompact(header, claims(alg, { jti: `${alg}-single` }), signingKey)
    if (alg === 'RS256') {
      forbiddenJwt = signCompact(
        header,
        claims(alg, { jti: 'forbidden', permissions: [] }),
        signingKey,
      )
    }
    algs[alg] = { ...entry, single, poolFile }
  }
  const records: PatRecord[] = []
  const pats: string[] = []
  const issue = (permissions: string[], quota = false) => {
    const issued = issuePat({
      tenantId: BENCH_TENANT,
      subject: 'bench-bot',
      name: 'bench',
      permissions,
      expiresAt: (nowSec + LIFETIME_SEC) * 1000,
      now: nowSec * 1000,
    })
    const limit = { limit: 1_000_000_000, refill: 'monthly' as const, counter: issued.record.id }
    records.push(quota ? { ...issued.record, quota: limit } : issued.record)
    return issued.token
  }
  for (let i = 0; i < poolSize; i++) pats.push(issue(['tokens:read']))
  const patSingle = issue(['tokens:read'])
  const patForbidden = issue([])
  const patPoolFile = join(dir, 'pat-pool.txt')
  writeFileSync(patPoolFile, `${pats.join('\n')}\n`)
  const quotaPats = Array.from({ length: QUOTA_POOL }, () => issue(['tokens:read'], true))
  const patQuotaPoolFile = join(dir, 'pat-quota-pool.txt')
  writeFileSync(patQuotaPoolFile, `${quotaPats.join('\n')}\n`)
  const patRecordsFile = join(dir, 'pat-records.jsonl')
  writeFileSync(patRecordsFile, `${records.map((r) => JSON.stringify(r)).join('\n')}\n`)
  // Right length and alphabet, wrong checksum: refused by the format check, no store access.
  const badChecksum = `${patSingle.slice(0, -6)}${patSingle.slice(-6) === 'AAAAAA' ? 'BBBBBB' : 'AAAAAA'}`
  return {
    format: FORMAT,
    createdSec: nowSec,
    poolSize,
    dir,
    algs,
    forbiddenJwt,
    patSingle,
    patPoolFile,
    patQuotaPoolFile,
    patRecordsFile,
    patForbidden,
    patGarbage: `pat_${Buffer.from('garbage').toString('hex')}`,
    patBadChecksum: badChecksum,
  }
}

/** PAT records from the fixtures file. */
export function readPatRecords(fixtures: Fixtures): PatRecord[] {
  return readFileSync(fixtures.patRecordsFile, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as PatRecord)
}

/**
 * The trusted-issuer configuration of every benchmark algorithm: one issuer per algorithm,
 * its public JWK inline (HS256: the shared secret). What tokengate's bench server stores and
 * what the micro-benchmark and the fixture test verify against.
 */
export function benchIssuers(fixtures: Fixtures): IssuerConfig[] {
  return BENCH_ALGORITHMS.map((alg) => {
    const entry = fixtures.algs[alg]
    return {
      issuer: issuerOf(alg),
      audiences: [BENCH_AUDIENCE],
      algorithms: [alg],
      keySource:
        alg === 'HS256'
          ? { kind: 'secret', secret: entry.secret as string, algorithm: alg }
          : { kind: 'jwks', jwks: { keys: [entry.publicJwk as Record<string, unknown>] } },
    }
  })
}

/** Creates the SQLite store the bench servers run on: the bench tenant, every PAT and issuer. */
export async function seedBenchStore(fixtures: Fixtures, dataDir: string): Promise<void> {
  const store = (await openStore({ dataDir })) as SqliteStore
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: BENCH_TENANT, name: 'Bench' }, now)
  await store.insertPats(readPatRecords(fixtures))
  for (const issuer of benchIssuers(fixtures)) await store.putIssuer(issuer, now)
  await store.close()
}

/**
 * A file of at least `count` JWTs of `alg` (asymmetric) found in no other fixture file, with
 * the pool's claims and lifetime, for runs where every request must carry a token the server
 * has never seen: the first run that asks signs them (RS256: ~2,000 a second), later runs
 * reuse and extend the file until the fixtures are regenerated.
 */
export function freshJwtPool(
  fixtures: Fixtures,
  alg: Exclude<BenchAlgorithm, 'HS256'>,
  count: number,
): string {
  const file = freshPoolFile(fixtures.dir, alg)
  const held = () =>
    existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : []
  const have = held()
  if (have.length >= count) return file
  const keyFile = privateKeyFile(fixtures.dir, alg)
  if (!existsSync(keyFile)) {
    throw new Error(`${keyFile} is missing (fixtures from an older bench): remove ${fixtures.dir}`)
  }
  const key = createPrivateKey(readFileSync(keyFile))
  const lines = [...have]
  for (let i = have.length; i < count; i++) {
    const claims = benchClaims(alg, fixtures.createdSec, { jti: `${alg}-fresh-${i}` })
    lines.push(signCompact(benchJwtHeader(alg), claims, key))
  }
  // Replaced, not appended to: a server may be reading it; a run that grew it further since keeps it.
  if (held().length < count) replaceFile(file, `${lines.join('\n')}\n`)
  return file
}
