import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { constants, createHmac, sign } from 'node:crypto'
import { describe, test } from 'node:test'
import {
  type BoundKey,
  bindJwk,
  bindPem,
  bindSecret,
  isNoneAlgorithm,
  secretKeySource,
  selectKey,
} from '../../src/core/jwt-keys.ts'
import { generateTestKeyPair } from '../helpers/jwt.ts'

const rsa = generateTestKeyPair('RS256')
const ec = generateTestKeyPair('ES256')

describe('key binding', () => {
  test('a JWK is bound to its alg, and its check accepts only signatures under that algorithm', () => {
    const rs = bindJwk({ ...rsa.publicJwk, alg: 'RS256', kid: 'r' })
    assert.equal(rs.alg, 'RS256')
    assert.equal(rs.kid, 'r')
    const input = Buffer.from('header.payload')
    const pkcs1 = sign('sha256', input, rsa.privateKey)
    const pss = sign('sha256', input, {
      key: rsa.privateKey,
      padding: constants.RSA_PKCS1_PSS_PADDING,
      saltLength: 32,
    })
    assert.equal(rs.verify(input, pkcs1), true)
    assert.equal(rs.verify(input, pss), false)
    const ps = bindJwk({ ...rsa.publicJwk, alg: 'PS256' })
    assert.equal(ps.verify(input, pss), true)
    assert.equal(ps.verify(input, pkcs1), false)
  })

  test('a JWK without alg: EC curves and Ed25519 are derived, RSA is refused', () => {
    assert.equal(bindJwk({ ...ec.publicJwk }).alg, 'ES256')
    assert.equal(bindJwk({ ...generateTestKeyPair('ES384').publicJwk }).alg, 'ES384')
    assert.equal(bindJwk({ ...generateTestKeyPair('EdDSA').publicJwk }).alg, 'EdDSA')
    assert.throws(() => bindJwk({ ...rsa.publicJwk }), /"alg" is required/)
  })

  test('JWKs that are not public signature keys are refused, each for its own reason', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ kty: 'oct', k: Buffer.alloc(32).toString('base64url'), alg: 'HS256' }, /symmetric/],
      [{ ...(rsa.privateKey.export({ format: 'jwk' }) as object), alg: 'RS256' }, /private/],
      [{ ...rsa.publicJwk, alg: 'RS256', use: 'enc' }, /"use"/],
      [{ ...rsa.publicJwk, alg: 'RS256', key_ops: ['encrypt'] }, /"key_ops"/],
      [{ ...rsa.publicJwk, alg: 'ES256' }, /cannot be used with ES256/],
      [{ ...ec.publicJwk, alg: 'ES384' }, /curve/],
      [{ ...ec.publicJwk, alg: 'HS256' }, /not accepted/],
      [{ ...ec.publicJwk, alg: 'none' }, /not accepted/],
      [{ ...ec.publicJwk, kid: 5 }, /"kid"/],
      [{ kty: 'RSA', n: 'AQAB', e: 'AQAB', alg: 'RS256' }, /2048|valid/],
      [{ kty: 'EC', crv: 'P-256', x: 'AA', y: 'AA', alg: 'ES256' }, /not a valid public key/],
    ]
    for (const [jwk, message] of cases) assert.throws(() => bindJwk(jwk), message)
  })

  test('a PEM is bound to the configured algorithm only if the key fits it', () => {
    assert.equal(bindPem(rsa.publicPem, 'PS384', undefined).alg, 'PS384')
    assert.throws(() => bindPem(rsa.publicPem, 'ES256', undefined), /cannot be used/)
    assert.throws(() => bindPem(ec.publicPem, 'HS256', undefined), /not a supported/)
    assert.throws(() =>
      bindPem('-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----', 'RS256', undefined),
    )
  })

  test('a secret is bound to one HMAC algorithm with a minimum length', () => {
    const secret = Buffer.alloc(48, 3).toString('base64url')
    const input = Buffer.from('header.payload')
    const mac = (hash: string) => createHmac(hash, Buffer.alloc(48, 3)).update(input).digest()
    const hs384 = bindSecret(secret, 'HS384')
    assert.equal(hs384.verify(input, mac('sha384')), true)
    assert.equal(hs384.verify(input, mac('sha256')), false)
    assert.throws(() => bindSecret(secret, 'HS512'), /at least 64 bytes/)
    assert.throws(() => bindSecret(secret, 'RS256'), /HS256, HS384 or HS512/)
  })

  test('none is recognised in every spelling', () => {
    for (const alg of ['none', 'None', 'NONE', 'nOnE', 'NoNe'])
      assert.equal(isNoneAlgorithm(alg), true)
    for (const alg of ['', 'non', 'nonee', 'HS256']) assert.equal(isNoneAlgorithm(alg), false)
  })
})

describe('secretKeySource: a secret file gives one key everywhere', () => {
  const bytes = Buffer.from('0123456789abcdef0123456789abcdef')

  test('the bytes as base64url; one trailing LF or CRLF is not part of the secret', () => {
    const plain = secretKeySource(bytes, 'HS256')
    assert.deepEqual(plain, {
      kind: 'secret',
      secret: bytes.toString('base64url'),
      algorithm: 'HS256',
    })
    assert.deepEqual(secretKeySource(Buffer.concat([bytes, Buffer.from('\n')]), 'HS256'), plain)
    assert.deepEqual(secretKeySource(Buffer.concat([bytes, Buffer.from('\r\n')]), 'HS256'), plain)
    const twoNewlines = secretKeySource(Buffer.concat([bytes, Buffer.from('\n\n')]), 'HS256')
    assert.notEqual(twoNewlines.secret, plain.secret)
  })

  test('a view into a larger buffer reads only its own bytes', () => {
    const larger = Buffer.concat([Buffer.from('xx'), bytes, Buffer.from('yy')])
    const view = larger.subarray(2, 2 + bytes.length)
    assert.equal(secretKeySource(view, 'HS256').secret, bytes.toString('base64url'))
  })

  test('the core binding decides: too short or a non-HMAC algorithm is refused', () => {
    assert.throws(
      () => secretKeySource(Buffer.from('short\n'), 'HS256'),
      /at least 32 bytes; this one has 5 bytes/,
    )
    assert.throws(() => secretKeySource(bytes, 'RS256'), /HS256, HS384 or HS512/)
  })
})

describe('key selection', () => {
  const key = (kid: string | undefined, alg: string) => ({ kid, alg }) as BoundKey

  test('the key is chosen by kid and must be bound to the token algorithm', () => {
    const keys = [key('a', 'RS256'), key('b', 'ES256')]
    assert.deepEqual(selectKey(keys, 'RS256', 'a'), { ok: true, key: keys[0] })
    assert.deepEqual(selectKey(keys, 'PS256', 'a'), { ok: false, reason: 'algorithm_not_allowed' })
    assert.deepEqual(selectKey(keys, 'RS256', 'b'), { ok: false, reason: 'algorithm_not_allowed' })
    assert.deepEqual(selectKey(keys, 'RS256', 'c'), { ok: false, reason: 'unknown_key' })
  })

  test('one kid may carry keys for several algorithms', () => {
    const keys = [key('a', 'RS256'), key('a', 'PS256')]
    assert.deepEqual(selectKey(keys, 'PS256', 'a'), { ok: true, key: keys[1] })
  })

  test('without a kid, exactly one key for the algorithm is required', () => {
    const keys = [key('a', 'RS256'), key('b', 'ES256'), key('c', 'ES256')]
    assert.deepEqual(selectKey(keys, 'RS256', undefined), { ok: true, key: keys[0] })
    assert.deepEqual(selectKey(keys, 'ES256', undefined), { ok: false, reason: 'ambiguous' })
    assert.deepEqual(selectKey(keys, 'EdDSA', undefined), {
      ok: false,
      reason: 'algorithm_not_allowed',
    })
    assert.deepEqual(selectKey([], 'EdDSA', undefined), { ok: false, reason: 'unknown_key' })
  })
})
