/**
 * Interop: the example SETs of CAEP 1.0 and SSF 1.0 (test/fixtures/ssf/, as the specs print
 * them), signed by a test key, verify under a verifier configured as their receiver and map
 * to the revocation rule the receiver must make.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, it } from 'node:test'
import { bindJwk, createStaticKeys } from '../../src/core/jwt-keys.ts'
import { mapCaepEvent } from '../../src/ssf/caep-rules.ts'
import { createSetVerifier } from '../../src/ssf/set-verify.ts'
import { generateTestKeyPair, signCompact } from '../helpers/jwt.ts'

const pair = generateTestKeyPair('ES256')
const jwk = { ...pair.publicJwk, kid: 'fixture', alg: 'ES256' }

function fixture(name: string): Record<string, unknown> {
  return JSON.parse(readFileSync(new URL(`../fixtures/ssf/${name}.json`, import.meta.url), 'utf8'))
}

/** Verifies the fixture signed as its transmitter would, at a minute after its `iat`. */
async function verifyAndMap(name: string) {
  const claims = fixture(name)
  const aud = Array.isArray(claims.aud) ? (claims.aud[0] as string) : (claims.aud as string)
  const nowMs = ((claims.iat as number) + 60) * 1000
  const verify = createSetVerifier({
    issuer: claims.iss as string,
    audience: aud,
    keys: createStaticKeys([bindJwk(jwk)], false),
    algorithms: ['ES256'],
    clock: { now: () => nowMs },
    clockToleranceSec: 30,
    maxAgeSec: 86_400,
  })
  const set = signCompact(
    { alg: 'ES256', kid: 'fixture', typ: 'secevent+jwt' },
    claims,
    pair.privateKey,
  )
  const verified = await verify(set)
  assert.ok(verified.ok, JSON.stringify(verified))
  assert.equal(verified.set.jti, claims.jti)
  const scope = { jwtIssuer: claims.iss as string, transmitter: claims.iss as string }
  return mapCaepEvent(verified.set, scope, nowMs)
}

const SESSION = 'dMTlD|1600802906337.16|16008.16'
const EVENT_MS = 1615304991 * 1000

describe('CAEP 1.0 and SSF 1.0 example SETs, signed by a test key', () => {
  it('session-revoked, simple opaque subject -> a sid rule for the session', async () => {
    assert.deepEqual(await verifyAndMap('caep-session-revoked-opaque'), {
      kind: 'revoke',
      rules: [{ kind: 'sid', value: SESSION }],
    })
  })

  it('session-revoked, complex subject with session and user -> a sid rule (the session only)', async () => {
    assert.deepEqual(await verifyAndMap('caep-session-revoked-complex'), {
      kind: 'revoke',
      rules: [{ kind: 'sid', value: SESSION }],
    })
  })

  it('session-revoked, complex subject of user + device, no session -> a sub rule before the event', async () => {
    assert.deepEqual(await verifyAndMap('caep-session-revoked-user-device'), {
      kind: 'revoke',
      rules: [{ kind: 'sub', value: 'jane.smith@example.com', issuedBefore: EVENT_MS }],
    })
  })

  it('credential-change, iss_sub subject -> a sub rule for tokens issued before the event', async () => {
    assert.deepEqual(await verifyAndMap('caep-credential-change'), {
      kind: 'revoke',
      rules: [{ kind: 'sub', value: 'jane.smith@example.com', issuedBefore: EVENT_MS }],
    })
  })

  it('token-claims-change of one token (jwt_id subject) -> a jti rule', async () => {
    assert.deepEqual(await verifyAndMap('caep-token-claims-change'), {
      kind: 'revoke',
      rules: [{ kind: 'jti', value: 'f61t6e20zdo3px56gepu8rzlsp4c1dpc0fx7' }],
    })
  })

  it('token-claims-change of a SAML assertion -> verified, no rule (not a JWT)', async () => {
    assert.deepEqual(await verifyAndMap('caep-token-claims-change-saml'), {
      kind: 'ignored',
      note: 'subject format not mapped',
    })
  })

  it('SSF verification with an array aud -> verified, stream management, no rule', async () => {
    assert.deepEqual(await verifyAndMap('ssf-verification'), {
      kind: 'stream',
      note: 'verification',
    })
  })

  it('an iss_sub subject of another issuer makes no rule', async () => {
    const claims = fixture('caep-credential-change')
    const verify = createSetVerifier({
      issuer: claims.iss as string,
      audience: claims.aud as string,
      keys: createStaticKeys([bindJwk(jwk)], false),
      algorithms: ['ES256'],
      clock: { now: () => ((claims.iat as number) + 1) * 1000 },
      clockToleranceSec: 30,
      maxAgeSec: 86_400,
    })
    const other = {
      ...claims,
      sub_id: { format: 'iss_sub', iss: 'https://elsewhere.example/', sub: 'jane' },
    }
    const verified = await verify(
      signCompact({ alg: 'ES256', kid: 'fixture', typ: 'secevent+jwt' }, other, pair.privateKey),
    )
    assert.ok(verified.ok)
    const scope = { jwtIssuer: claims.iss as string, transmitter: claims.iss as string }
    assert.equal(mapCaepEvent(verified.set, scope, Date.now()).kind, 'ignored')
  })
})
