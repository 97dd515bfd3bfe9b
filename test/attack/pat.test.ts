import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, it } from 'node:test'
import { createAuthenticator } from '../../src/core/authenticate.ts'
import { hashPat, issuePat } from '../../src/core/pat.ts'
import type { AuthLookups, JwtVerifier } from '../../src/core/ports.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { assertNoEcho, bearer, type Gate, startGate } from './harness.ts'

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** Replaces the character at `index` with the next base62 character. */
function mutate(token: string, index: number): string {
  const c = token[index] as string
  const next = BASE62[(BASE62.indexOf(c) + 1) % 62] as string
  return `${token.slice(0, index)}${next}${token.slice(index + 1)}`
}

function toggleCase(token: string, index: number): string | undefined {
  const c = token[index] as string
  const flipped = c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase()
  if (flipped === c) return undefined
  return `${token.slice(0, index)}${flipped}${token.slice(index + 1)}`
}

/** A well-formed PAT (right checksum) that no store holds. */
function unknownPat(): string {
  const issued = issuePat({
    tenantId: 'acme',
    subject: 's',
    name: 'n',
    permissions: [],
    expiresAt: null,
    now: Date.now(),
  })
  return issued.token
}

/**
 * PAT attacks at the core, against the real SQLite store with every call counted: a
 * malformed or mis-checksummed PAT must cost no store access at all, a well-formed unknown
 * one exactly one indexed lookup by hash.
 */
describe('PAT attacks at the core (real SQLite store, calls counted)', () => {
  const path = join(tempDir('tg-pat-'), 'store.db')
  const store = openSqliteStore(path)
  const calls: string[] = []
  const jwtCalls: string[] = []
  let valid: string

  const counted = new Proxy(store, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver)
      if (typeof value !== 'function') return value
      return (...args: unknown[]) => {
        calls.push(String(name))
        return value.apply(target, args)
      }
    },
  }) as unknown as AuthLookups
  const jwt: JwtVerifier = {
    async verify() {
      jwtCalls.push('verify')
      return { ok: false, failure: { code: 'invalid_token', reason: 'malformed', detail: 'x' } }
    },
    close() {},
  }
  const authenticate = createAuthenticator({ lookups: counted, jwt, clock: { now: Date.now } })
  const attempt = (token: string, tenantIds: string[] = []) =>
    authenticate({ authorization: [`Bearer ${token}`], tenantIds })

  before(async () => {
    await store.migrate()
    await store.createTenant({ id: 'acme', name: 'Acme' }, Date.now())
    const issued = issuePat({
      tenantId: 'acme',
      subject: 'svc',
      name: 'n',
      permissions: [],
      expiresAt: null,
      now: Date.now(),
    })
    await store.insertPat(issued.record)
    valid = issued.token
  })

  after(async () => {
    await store.close()
  })

  it('baseline: the valid PAT authenticates with one PAT lookup and one tenant lookup', async () => {
    calls.length = 0
    const result = await attempt(valid)
    assert.equal(result.ok, true)
    assert.deepEqual(calls, ['findPatByHash', 'findTenant'])
  })

  it('every single-character mutation of the token (all 38 positions after pat_) → 401 invalid_token, no store access', async () => {
    calls.length = 0
    for (let index = 4; index < valid.length; index++) {
      const result = await attempt(mutate(valid, index))
      assert.equal(result.ok, false)
      if (!result.ok) {
        assert.equal(result.failure.code, 'invalid_token', `position ${index}`)
        assert.equal(
          result.failure.code === 'invalid_token' && result.failure.reason,
          'bad_checksum',
        )
      }
    }
    assert.deepEqual(calls, [])
  })

  it('every case change of a letter → 401 invalid_token, no store access', async () => {
    calls.length = 0
    let tried = 0
    for (let index = 4; index < valid.length; index++) {
      const changed = toggleCase(valid, index)
      if (changed === undefined) continue
      tried++
      const result = await attempt(changed)
      assert.equal(result.ok, false, `position ${index}`)
    }
    assert.ok(tried > 10)
    assert.deepEqual(calls, [])
  })

  it('"PAT_", "Pat_" and "pat-" prefixes are not PATs: the JWT path refuses them, no store access', async () => {
    calls.length = 0
    jwtCalls.length = 0
    for (const prefix of ['PAT_', 'Pat_', 'pAt_']) {
      const result = await attempt(`${prefix}${valid.slice(4)}`)
      assert.equal(result.ok, false)
    }
    assert.deepEqual(calls, [])
    assert.equal(jwtCalls.length, 3)
  })

  it('wrong length, alphabet or padding → 401, no store access', async () => {
    calls.length = 0
    for (const token of [
      valid.slice(0, -1),
      `${valid}0`,
      `${valid.slice(0, -1)}=`,
      `${valid.slice(0, 10)}-${valid.slice(11)}`,
      `${valid.slice(0, 10)}_${valid.slice(11)}`,
      'pat_',
      `pat_${'0'.repeat(38)}`,
    ]) {
      assert.equal((await attempt(token)).ok, false, token)
    }
    assert.deepEqual(calls, [])
  })

  it('a valid-looking unknown PAT (right checksum) → 401 invalid_token after exactly one lookup by hash', async () => {
    const unknown = unknownPat()
    calls.length = 0
    const result = await attempt(unknown)
    assert.equal(result.ok, false)
    assert.equal(!result.ok && result.failure.code, 'invalid_token')
    assert.deepEqual(calls, ['findPatByHash'])
  })

  it('the PAT lookup by hash is an index search, not a table scan (SQLite query plan)', () => {
    const db = new DatabaseSync(path, { readOnly: true })
    const plan = db
      .prepare('EXPLAIN QUERY PLAN SELECT * FROM pats WHERE token_hash = ?')
      .all(hashPat(valid))
      .map((row) => String((row as { detail: unknown }).detail))
    db.close()
    assert.match(plan.join('\n'), /^SEARCH pats USING (INDEX|COVERING INDEX)/)
  })
})

/**
 * PAT attacks over the wire, and the timing of unknown against known-but-revoked tokens.
 */
describe('PAT attacks over HTTPS', () => {
  let gate: Gate
  let valid: string
  let revoked: string

  async function issue() {
    const out = await gate.cli('pat', 'issue', '--tenant', 'acme', '--subject', 'svc', '--json')
    assert.equal(out.code, 0, out.stderr)
    return JSON.parse(out.stdout) as { token: string; id: string }
  }

  before(async () => {
    gate = await startGate()
    assert.equal((await gate.cli('tenant', 'create', 'acme')).code, 0)
    valid = (await issue()).token
    const gone = await issue()
    revoked = gone.token
    assert.equal((await gate.cli('pat', 'revoke', gone.id)).code, 0)
  })

  after(async () => {
    await gate?.close()
  })

  it('every mutated, case-changed, unknown or revoked PAT → 401 invalid_token with a challenge, never echoed', async () => {
    const unknown = unknownPat()
    const variants = [unknown, revoked]
    for (let index = 4; index < valid.length; index += 3) variants.push(mutate(valid, index))
    for (let index = 4; index < valid.length; index += 5) {
      const changed = toggleCase(valid, index)
      if (changed) variants.push(changed)
    }
    for (const token of variants) {
      const r = await gate.request('/api/v1/me', bearer(token))
      assert.equal(r.status, 401, token)
      assert.equal(r.json.code, 'invalid_token')
      assert.match(String(r.headers['www-authenticate']), /error="invalid_token"/)
      assertNoEcho(r, [token, valid])
    }
    assert.equal((await gate.request('/api/v1/me', bearer(valid))).status, 200)
  })

  it('unknown and revoked PATs take the same time within noise (medians, generous 3x bound)', async (t) => {
    const unknown = unknownPat()
    const samples: Record<'unknown' | 'revoked', number[]> = { unknown: [], revoked: [] }
    const time = async (kind: 'unknown' | 'revoked', token: string) => {
      const started = process.hrtime.bigint()
      const r = await gate.request('/api/v1/me', bearer(token))
      samples[kind].push(Number(process.hrtime.bigint() - started) / 1e6)
      assert.equal(r.status, 401)
    }
    for (let i = 0; i < 20; i++)
      await time(i % 2 ? 'unknown' : 'revoked', i % 2 ? unknown : revoked)
    samples.unknown.length = 0
    samples.revoked.length = 0
    for (let i = 0; i < 300; i++) {
      // Interleaved, alternating which goes first, so drift affects both alike.
      if (i % 2) {
        await time('unknown', unknown)
        await time('revoked', revoked)
      } else {
        await time('revoked', revoked)
        await time('unknown', unknown)
      }
    }
    const median = (values: number[]) =>
      [...values].sort((a, b) => a - b)[values.length >> 1] as number
    const u = median(samples.unknown)
    const r = median(samples.revoked)
    t.diagnostic(
      `median unknown ${u.toFixed(3)} ms, revoked ${r.toFixed(3)} ms, ratio ${(r / u).toFixed(2)}`,
    )
    assert.ok(r / u < 3 && u / r < 3, `unknown ${u} ms vs revoked ${r} ms`)
  })
})
