import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createHash } from 'node:crypto'
import { describe, test } from 'node:test'
import {
  checkedPatFingerprint,
  fingerprintToken,
  jwtFingerprint,
  patFingerprint,
} from '../../src/core/fingerprint.ts'
import { generatePat, hashPat, patLast4 } from '../../src/core/pat.ts'
import { jwtLike } from '../helpers/core-fakes.ts'

describe('fingerprintToken', () => {
  test('a well-formed PAT → pat_… and its last four characters', () => {
    const token = generatePat()
    assert.equal(fingerprintToken(token), `pat_…${token.slice(-4)}`)
  })

  test('checkedPatFingerprint of a well-formed PAT is its patFingerprint', () => {
    for (let i = 0; i < 500; i++) {
      const token = generatePat()
      assert.equal(checkedPatFingerprint(token), patFingerprint(patLast4(token)))
    }
  })

  test('a malformed pat_ string never shows its characters → a short SHA-256 prefix', () => {
    const token = generatePat()
    const typo = `${token.slice(0, -1)}${token.endsWith('a') ? 'b' : 'a'}`
    const fingerprint = fingerprintToken(typo)
    assert.match(fingerprint, /^hmac:[0-9a-f]{8}$/)
    assert.match(fingerprintToken('pat_ab'), /^hmac:[0-9a-f]{8}$/)
  })

  test('a JWT → jwt:iss=…;kid=…;sub=… from the unverified header and payload', () => {
    const token = jwtLike(
      { alg: 'ES256', kid: 'key-7' },
      { iss: 'https://idp.example/', sub: 'u-1' },
    )
    assert.equal(fingerprintToken(token), 'jwt:iss=https://idp.example/;kid=key-7;sub=u-1')
  })

  test('absent or non-string claims show as "-"', () => {
    assert.equal(fingerprintToken(jwtLike({ alg: 'ES256' }, { sub: 42 })), 'jwt:iss=-;kid=-;sub=-')
  })

  test('the JWT signature never appears', () => {
    const signature = 'S1GNATUREsecretPART_xyz-123'
    const fingerprint = fingerprintToken(jwtLike(undefined, undefined, signature))
    assert.ok(!fingerprint.includes(signature), fingerprint)
    assert.ok(!fingerprint.includes('S1GNATURE'), fingerprint)
  })

  test('claims are sanitised (no spaces, quotes, control characters) and cut to 64', () => {
    const evil = `a b"c\nd\u0000e;f=g${'x'.repeat(100)}`
    const fingerprint = fingerprintToken(jwtLike({ kid: evil }, { iss: evil, sub: 'ok' }))
    assert.match(
      fingerprint,
      /^jwt:iss=[A-Za-z0-9._:/@+_-]{64}…;kid=[A-Za-z0-9._:/@+_-]{64}…;sub=ok$/,
    )
  })

  test('three segments that are not base64url JSON objects → jwt:unparseable', () => {
    assert.equal(fingerprintToken('abc.def.ghi'), 'jwt:unparseable')
    const array = Buffer.from('[1]').toString('base64url')
    assert.equal(fingerprintToken(`${array}.${array}.sig`), 'jwt:unparseable')
  })

  test('anything else → hmac: and 8 hex digits, stable per token within the process', () => {
    for (const garbage of ['x', 'PAT_abc', 'a.b', 'a.b.c.d.e', 'z'.repeat(10_000)]) {
      const fingerprint = fingerprintToken(garbage)
      assert.match(fingerprint, /^hmac:[0-9a-f]{8}$/)
      assert.equal(fingerprintToken(garbage), fingerprint)
    }
    assert.notEqual(fingerprintToken('token-one'), fingerprintToken('token-two'))
  })

  test("never a prefix of the token's SHA-256 (spans and logs carry no token hash)", () => {
    for (const bad of ['pat_ab', `pat_${'A'.repeat(38)}`, 'garbage', 'a.b']) {
      const digits = fingerprintToken(bad).slice('hmac:'.length)
      assert.notEqual(digits, createHash('sha256').update(bad).digest('hex').slice(0, 8))
    }
  })

  test('a malformed PAT fingerprinted with its store hash (hashPat) gives the same value', () => {
    for (const bad of ['pat_ab', `pat_${'A'.repeat(38)}`, 'pat_\u00e9t\u00e9']) {
      assert.equal(fingerprintToken(bad, hashPat(bad)), fingerprintToken(bad))
    }
  })

  test('an over-long JWT-shaped token is not decoded', () => {
    const token = jwtLike(undefined, { iss: 'i', sub: 's', pad: 'p'.repeat(9_000) })
    assert.match(fingerprintToken(token), /^hmac:[0-9a-f]{8}$/)
  })

  test('jwtFingerprint and patFingerprint sanitise the values they are given', () => {
    assert.equal(
      jwtFingerprint('https://i.example', undefined, 'a b'),
      'jwt:iss=https://i.example;kid=-;sub=a_b',
    )
    assert.equal(patFingerprint('ab\ncd'), 'pat_…ab_cd')
  })

  test('PAT_ (uppercase) is not fingerprinted as a PAT', () => {
    const token = generatePat().replace('pat_', 'PAT_')
    assert.ok(!fingerprintToken(token).startsWith('pat_'))
  })
})
