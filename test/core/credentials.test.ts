import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { MAX_TOKEN_LENGTH, parseAuthorization } from '../../src/core/credentials.ts'

const TOKEN = 'pat_secretvalue1234567890abcdef'

function malformedDetail(values: readonly string[]): string {
  const result = parseAuthorization(values)
  assert.equal(result.ok, false, `expected ${JSON.stringify(values)} to be refused`)
  if (result.ok) throw new Error('unreachable')
  assert.equal(result.failure.code, 'malformed_authorization')
  if (result.failure.code !== 'malformed_authorization') throw new Error('unreachable')
  return result.failure.detail
}

describe('parseAuthorization', () => {
  test('no Authorization header → missing_authorization', () => {
    assert.deepEqual(parseAuthorization([]), {
      ok: false,
      failure: { code: 'missing_authorization' },
    })
  })

  test('exactly "Bearer" + one space + b64token → the token', () => {
    assert.deepEqual(parseAuthorization([`Bearer ${TOKEN}`]), { ok: true, token: TOKEN })
  })

  test('every RFC 6750 b64token character and trailing "=" padding are accepted', () => {
    const token = 'AZaz09-._~+/=='
    assert.deepEqual(parseAuthorization([`Bearer ${token}`]), { ok: true, token })
  })

  test('a JWT-shaped token is returned unchanged', () => {
    const jwt = 'eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ1In0.c2ln'
    assert.deepEqual(parseAuthorization([`Bearer ${jwt}`]), { ok: true, token: jwt })
  })

  test('two Authorization headers → malformed, even when both are valid and equal', () => {
    malformedDetail([`Bearer ${TOKEN}`, `Bearer ${TOKEN}`])
    malformedDetail([`Bearer ${TOKEN}`, 'Bearer other'])
  })

  const refused: [string, string][] = [
    ['lowercase scheme', `bearer ${TOKEN}`],
    ['uppercase scheme', `BEARER ${TOKEN}`],
    ['two spaces', `Bearer  ${TOKEN}`],
    ['trailing space', `Bearer ${TOKEN} `],
    ['leading space', ` Bearer ${TOKEN}`],
    ['tab separator', `Bearer\t${TOKEN}`],
    ['tab after the token', `Bearer ${TOKEN}\t`],
    ['empty token', 'Bearer '],
    ['"Bearer" alone', 'Bearer'],
    ['empty header value', ''],
    ['Basic scheme', `Basic ${TOKEN}`],
    ['Token scheme', `Token ${TOKEN}`],
    ['no scheme', TOKEN],
    ['CR LF inside', `Bearer ${TOKEN}\r\nX-Evil: 1`],
    ['LF at the end', `Bearer ${TOKEN}\n`],
    ['comma-joined duplicates', `Bearer ${TOKEN}, Bearer ${TOKEN}`],
    ['a space inside the token', `Bearer pat_a ${TOKEN}`],
    ['padding in the middle', `Bearer ab=cd${TOKEN}`],
    ['only padding', 'Bearer =='],
    ['non-ASCII letter', `Bearer ${TOKEN}é`],
    ['quoted token', `Bearer "${TOKEN}"`],
    ['NUL byte', `Bearer ${TOKEN}\u0000`],
  ]
  for (const [name, value] of refused) {
    test(`${name} → malformed_authorization whose detail never contains the token`, () => {
      const detail = malformedDetail([value])
      assert.ok(detail.length > 0)
      assert.ok(!detail.includes(TOKEN), detail)
      assert.ok(!detail.includes('pat_'), detail)
    })
  }

  test('the details explain the common mistakes precisely', () => {
    assert.match(malformedDetail([`bearer ${TOKEN}`]), /spelled exactly "Bearer"/)
    assert.match(malformedDetail([`Bearer  ${TOKEN}`]), /one space/)
    assert.match(malformedDetail([`Bearer\t${TOKEN}`]), /one space/)
    assert.match(malformedDetail(['Bearer']), /empty/)
    assert.match(malformedDetail(['Bearer ']), /empty/)
    assert.match(malformedDetail([`Basic ${TOKEN}`]), /Bearer scheme/)
    assert.match(malformedDetail([`Bearer ${TOKEN} `]), /characters that are not allowed/)
    assert.match(malformedDetail(['a', 'b']), /exactly one Authorization header/)
  })

  test('a token longer than MAX_TOKEN_LENGTH → malformed; exactly the bound is accepted', () => {
    const atBound = 'a'.repeat(MAX_TOKEN_LENGTH)
    assert.deepEqual(parseAuthorization([`Bearer ${atBound}`]), { ok: true, token: atBound })
    assert.match(malformedDetail([`Bearer ${atBound}a`]), /too long/)
  })
})
