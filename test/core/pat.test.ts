import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { crc32 } from 'node:zlib'
import {
  checkPatFormat,
  generatePat,
  hashPat,
  isPatToken,
  issuePat,
  PAT_LENGTH,
  PAT_PATTERN,
  PAT_PREFIX,
  patLast4,
  randomBase62,
} from '../../src/core/pat.ts'

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** Independent decoder of the 6-character big-endian base62 checksum. */
function decodeBase62(text: string): number {
  let value = 0
  for (const char of text) value = value * 62 + BASE62.indexOf(char)
  return value
}

describe('PAT format', () => {
  test('a generated PAT is pat_ + 38 base62 characters, 42 in all', () => {
    const token = generatePat()
    assert.equal(PAT_PREFIX, 'pat_')
    assert.equal(PAT_LENGTH, 42)
    assert.equal(token.length, 42)
    assert.match(token, /^pat_[0-9A-Za-z]{38}$/)
    assert.deepEqual(checkPatFormat(token), { ok: true })
  })

  test('the last 6 characters are the base62 CRC32 of the 32 random characters', () => {
    for (let i = 0; i < 50; i++) {
      const token = generatePat()
      const random = token.slice(4, 36)
      assert.equal(decodeBase62(token.slice(36)), crc32(random))
    }
  })

  test('a hand-built token with a correct checksum passes; its checksum is zero-padded', () => {
    const random = '0'.repeat(32)
    let checksum = ''
    let rest = crc32(random)
    for (let i = 0; i < 6; i++) {
      checksum = BASE62[rest % 62] + checksum
      rest = Math.floor(rest / 62)
    }
    assert.deepEqual(checkPatFormat(`pat_${random}${checksum}`), { ok: true })
  })

  test('generated PATs do not repeat', () => {
    const tokens = new Set(Array.from({ length: 2000 }, generatePat))
    assert.equal(tokens.size, 2000)
  })

  test('random characters are uniform over base62 (no modulo bias)', () => {
    // 62 × 4000 samples: each count is ~4000 ± 63 (1σ). `byte % 62` would give the first
    // eight characters ~25% more (≈5000), far outside the ±400 tolerance.
    const sample = randomBase62(62 * 4000)
    const counts = new Map<string, number>()
    for (const char of sample) counts.set(char, (counts.get(char) ?? 0) + 1)
    assert.equal(counts.size, 62)
    for (const [char, count] of counts) {
      assert.ok(Math.abs(count - 4000) < 400, `${char} appeared ${count} times`)
    }
  })

  test('every single-character change to a valid PAT fails the format check', () => {
    const token = generatePat()
    const alphabet = `${BASE62}-._~+/=`
    for (let i = 0; i < token.length; i++) {
      for (const char of alphabet) {
        if (char === token[i]) continue
        const mutated = token.slice(0, i) + char + token.slice(i + 1)
        const check = checkPatFormat(mutated)
        assert.equal(check.ok, false, `position ${i} → ${char} passed`)
        if (i >= 4 && BASE62.includes(char)) {
          assert.deepEqual(check, { ok: false, reason: 'bad_checksum' })
        }
      }
    }
  })

  test('wrong length, prefix or alphabet → malformed', () => {
    const token = generatePat()
    const cases = [
      '',
      'pat_',
      token.slice(0, -1),
      `${token}a`,
      `PAT_${token.slice(4)}`,
      `pat-${token.slice(4)}`,
      `pat_${token.slice(4, -1)}-`,
      `pat_${token.slice(4, -1)}é`,
      `pat_${'a'.repeat(37)} `,
    ]
    for (const candidate of cases) {
      assert.deepEqual(checkPatFormat(candidate), { ok: false, reason: 'malformed' }, candidate)
    }
  })

  test('PAT_PATTERN finds PATs in text and ignores look-alikes', () => {
    const token = generatePat()
    assert.ok(PAT_PATTERN.test(`export TOKEN=${token}`))
    assert.ok(PAT_PATTERN.test(`Authorization: Bearer ${token}`))
    assert.ok(!PAT_PATTERN.test(`${token}x`), 'too long')
    assert.ok(!PAT_PATTERN.test(token.slice(0, -1)), 'too short')
    assert.ok(!PAT_PATTERN.test(`my_${token}`), 'inside a longer word')
    assert.ok(!PAT_PATTERN.flags.includes('g'), 'stateless for .test()')
    const text = `a=${token} b=${generatePat()}`
    assert.equal([...text.matchAll(new RegExp(PAT_PATTERN.source, 'g'))].length, 2)
  })

  test('isPatToken accepts only the exact lowercase pat_ prefix', () => {
    assert.equal(isPatToken(generatePat()), true)
    assert.equal(isPatToken('pat_x'), true)
    assert.equal(isPatToken('PAT_x'), false)
    assert.equal(isPatToken('Pat_x'), false)
    assert.equal(isPatToken('pat-x'), false)
    assert.equal(isPatToken('eyJhbGciOiJFUzI1NiJ9.e30.c2ln'), false)
  })

  test('hashPat is the lowercase hex SHA-256 of the whole token', () => {
    assert.equal(hashPat('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')
    const token = generatePat()
    assert.match(hashPat(token), /^[0-9a-f]{64}$/)
    assert.notEqual(hashPat(token), hashPat(token.slice(4)))
  })

  test('patLast4 is the last four characters', () => {
    assert.equal(patLast4('pat_abcdefgh'), 'efgh')
  })
})

describe('issuePat', () => {
  const input = {
    tenantId: 'acme',
    subject: 'ci-bot',
    name: 'deploy',
    permissions: ['tokens:read', 'audit:read'],
    expiresAt: 2_000,
    now: 1_000,
  }

  test('returns a valid token and a record holding only its hash', () => {
    const { token, record } = issuePat(input)
    assert.deepEqual(checkPatFormat(token), { ok: true })
    assert.match(record.id, /^tok_[0-9A-Za-z]{20}$/)
    assert.deepEqual(
      { ...record, id: 'x' },
      {
        id: 'x',
        tokenHash: hashPat(token),
        tenantId: 'acme',
        subject: 'ci-bot',
        name: 'deploy',
        permissions: ['tokens:read', 'audit:read'],
        last4: token.slice(-4),
        createdAt: 1_000,
        expiresAt: 2_000,
        revokedAt: null,
        lastUsedAt: null,
        rotatedFrom: null,
      },
    )
    assert.ok(!JSON.stringify(record).includes(token.slice(4, 36)), 'no plaintext in the record')
  })

  test('the record is frozen and does not share the caller’s permissions array', () => {
    const permissions = ['tokens:read']
    const { record } = issuePat({ ...input, permissions })
    permissions.push('tokens:revoke')
    assert.deepEqual(record.permissions, ['tokens:read'])
    assert.ok(Object.isFrozen(record))
    assert.ok(Object.isFrozen(record.permissions))
  })

  test('keeps rotatedFrom and accepts a token that never expires', () => {
    const { record } = issuePat({ ...input, expiresAt: null, rotatedFrom: 'tok_old' })
    assert.equal(record.expiresAt, null)
    assert.equal(record.rotatedFrom, 'tok_old')
  })

  test('two issues give different tokens and ids', () => {
    const a = issuePat(input)
    const b = issuePat(input)
    assert.notEqual(a.token, b.token)
    assert.notEqual(a.record.id, b.record.id)
  })

  test('refuses an empty tenant or subject and an expiry not after now', () => {
    assert.throws(() => issuePat({ ...input, tenantId: '' }), RangeError)
    assert.throws(() => issuePat({ ...input, subject: '' }), RangeError)
    assert.throws(() => issuePat({ ...input, expiresAt: 1_000 }), RangeError)
    assert.throws(() => issuePat({ ...input, expiresAt: Number.NaN }), RangeError)
    assert.throws(() => issuePat({ ...input, now: Number.NaN }), RangeError)
  })
})
