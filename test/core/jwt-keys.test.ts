import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { constants, createHmac, sign } from 'node:crypto'
import { describe, test } from 'node:test'
import {
  type BoundKey,
  bindIssuerJwk,
  bindJwk,
  bindPem,
  bindSecret,
  isNoneAlgorithm,
  JwkRefused,
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

  test('a JWK without alg and without an allow-list: EC curves and Ed25519 are derived, RSA is refused', () => {
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

describe("binding a JWK under an issuer's algorithm allow-list", () => {
  const input = Buffer.from('header.payload')
  const pss = (hash: string, saltLength: number) =>
    sign(hash, input, { key: rsa.privateKey, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength })
  const refusal = (run: () => unknown): string => {
    try {
      run()
    } catch (error) {
      assert.ok(error instanceof JwkRefused, String(error))
      return error.reason
    }
    return assert.fail('expected the key to be refused')
  }

  test('an RSA JWK without alg is bound to each RSA algorithm on the allow-list, and only to those', () => {
    const bound = bindIssuerJwk({ ...rsa.publicJwk, kid: 'r' }, [
      'RS256',
      'PS256',
      'ES256',
      'EdDSA',
    ])
    assert.deepEqual(
      bound.map((key) => [key.kid, key.alg]),
      [
        ['r', 'RS256'],
        ['r', 'PS256'],
      ],
    )
    const [rs256, ps256] = bound as [BoundKey, BoundKey]
    const pkcs1 = sign('sha256', input, rsa.privateKey)
    assert.equal(rs256.verify(input, pkcs1), true)
    assert.equal(rs256.verify(input, pss('sha256', 32)), false)
    assert.equal(ps256.verify(input, pss('sha256', 32)), true)
    assert.equal(ps256.verify(input, pkcs1), false)
    const wide = bindIssuerJwk({ ...rsa.publicJwk }, ['PS512', 'RS384', 'ES384'])
    assert.deepEqual(
      wide.map((key) => key.alg),
      ['RS384', 'PS512'],
    )
    assert.equal(wide[1]?.verify(input, pss('sha512', 64)), true)
  })

  test('an RSA JWK without alg and no RSA algorithm allowed is refused as algorithm_not_allowed', () => {
    assert.equal(
      refusal(() => bindIssuerJwk({ ...rsa.publicJwk }, ['ES256', 'EdDSA'])),
      'algorithm_not_allowed',
    )
  })

  test('EC and Ed25519 JWKs without alg keep their one algorithm, which must be allowed', () => {
    const p256 = bindIssuerJwk({ ...ec.publicJwk }, ['ES256', 'ES384', 'RS256'])
    assert.deepEqual(
      p256.map((key) => key.alg),
      ['ES256'],
    )
    const ed = generateTestKeyPair('EdDSA').publicJwk
    assert.deepEqual(
      bindIssuerJwk({ ...ed }, ['EdDSA', 'Ed25519']).map((key) => key.alg),
      ['EdDSA'],
    )
    assert.equal(
      refusal(() => bindIssuerJwk({ ...ec.publicJwk }, ['ES384'])),
      'algorithm_not_allowed',
    )
    assert.equal(
      refusal(() => bindIssuerJwk({ ...ed }, ['RS256'])),
      'algorithm_not_allowed',
    )
  })

  test('a JWK with alg is bound to that alg alone, and refused when the allow-list leaves it out', () => {
    assert.deepEqual(
      bindIssuerJwk({ ...rsa.publicJwk, alg: 'PS384' }, ['RS256', 'PS384']).map((key) => key.alg),
      ['PS384'],
    )
    assert.equal(
      refusal(() => bindIssuerJwk({ ...rsa.publicJwk, alg: 'RS512' }, ['RS256', 'PS256'])),
      'algorithm_not_allowed',
    )
    assert.equal(
      refusal(() => bindIssuerJwk({ ...rsa.publicJwk, alg: 'ES256' }, ['ES256'])),
      'invalid_key',
    )
  })

  test('every refusal carries one reason: not for signatures, unsupported, or invalid', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ ...rsa.publicJwk, use: 'enc', alg: 'RSA-OAEP' }, 'not_for_signing'],
      [{ ...rsa.publicJwk, key_ops: ['encrypt'] }, 'not_for_signing'],
      [{ kty: 'oct', k: Buffer.alloc(32).toString('base64url'), alg: 'HS256' }, 'unsupported_key'],
      [{ ...rsa.publicJwk, alg: 'RSA-OAEP' }, 'unsupported_key'],
      [{ ...ec.publicJwk, alg: 'none' }, 'unsupported_key'],
      [{ kty: 'EC', crv: 'secp256k1', x: 'AA', y: 'AA' }, 'unsupported_key'],
      [{ kty: 'XYZ' }, 'unsupported_key'],
      [{ ...(rsa.privateKey.export({ format: 'jwk' }) as object) }, 'invalid_key'],
      [{ kty: 'RSA', n: 'AQAB', e: 'AQAB' }, 'invalid_key'],
      [{ ...generateTestKeyPair('RS256').publicJwk, n: 'AQAB' }, 'invalid_key'],
      [{ ...ec.publicJwk, kid: 5 }, 'invalid_key'],
    ]
    for (const [jwk, reason] of cases) {
      assert.equal(
        refusal(() => bindIssuerJwk(jwk, ['RS256', 'PS256', 'ES256'])),
        reason,
        JSON.stringify(jwk.kty),
      )
    }
  })

  test('a refusal names no key material', () => {
    const material = { ...rsa.publicJwk, kid: 'k' } as Record<string, string>
    const n = material.n as string
    const cases: [Record<string, unknown>, readonly string[]][] = [
      [material, ['ES256']],
      [{ ...material, n: n.slice(0, 120) }, ['RS256']],
      [{ ...material, alg: 'ES256' }, ['ES256']],
    ]
    for (const [jwk, allowed] of cases) {
      try {
        bindIssuerJwk(jwk, allowed)
        assert.fail('expected a refusal')
      } catch (error) {
        assert.ok(error instanceof JwkRefused, String(error))
        assert.ok(!error.message.includes(n.slice(0, 16)), error.message)
        assert.ok(!error.message.includes(String(material.e)), error.message)
      }
    }
  })

  test('two RSA keys without alg and without kid: a kid-less token is ambiguous, never tried on both', () => {
    const other = generateTestKeyPair('RS256')
    const keys = [
      ...bindIssuerJwk({ ...rsa.publicJwk }, ['RS256', 'PS256']),
      ...bindIssuerJwk({ ...other.publicJwk }, ['RS256', 'PS256']),
    ]
    assert.deepEqual(selectKey(keys, 'RS256', undefined), { ok: false, reason: 'ambiguous' })
    const named = [
      ...bindIssuerJwk({ ...rsa.publicJwk, kid: 'a' }, ['RS256', 'PS256']),
      ...bindIssuerJwk({ ...other.publicJwk, kid: 'b' }, ['RS256', 'PS256']),
    ]
    const chosen = selectKey(named, 'PS256', 'b')
    assert.ok(chosen.ok)
    assert.equal(chosen.key.kid, 'b')
    assert.equal(chosen.key.alg, 'PS256')
    assert.deepEqual(selectKey(named, 'PS256', 'c'), { ok: false, reason: 'unknown_key' })
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
