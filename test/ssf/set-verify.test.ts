/**
 * SET verification (RFC 8417, answers of RFC 8935 §2.4): every malformed, unsigned, forged,
 * misaddressed, stale or future SET is refused with its error code.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { bindJwk, createStaticKeys } from '../../src/core/jwt-keys.ts'
import { CAEP_EVENT } from '../../src/ssf/events.ts'
import { createSetVerifier } from '../../src/ssf/set-verify.ts'
import { generateTestKeyPair, signCompact } from '../helpers/jwt.ts'

const ISS = 'https://tx.example'
const AUD = 'https://api.example/ssf'
const NOW = Date.UTC(2026, 10, 1)
const pair = generateTestKeyPair('ES256')
const other = generateTestKeyPair('ES256')
const jwk = { ...pair.publicJwk, kid: 'k1', alg: 'ES256' }

const verify = createSetVerifier({
  issuer: ISS,
  audience: AUD,
  keys: createStaticKeys([bindJwk(jwk)], false),
  algorithms: ['ES256'],
  clock: { now: () => NOW },
  clockToleranceSec: 30,
  maxAgeSec: 3600,
})

const claims = (over: Record<string, unknown> = {}) => ({
  iss: ISS,
  aud: AUD,
  jti: 'set-1',
  iat: NOW / 1000,
  sub_id: { format: 'iss_sub', iss: ISS, sub: 'alice' },
  events: { [CAEP_EVENT.credentialChange]: { credential_type: 'password', change_type: 'update' } },
  ...over,
})
const header = (over: Record<string, unknown> = {}) => ({
  alg: 'ES256',
  kid: 'k1',
  typ: 'secevent+jwt',
  ...over,
})
const sign = (c = claims(), h = header(), key = pair.privateKey) => signCompact(h, c, key)

async function refused(token: string, err: string) {
  const result = await verify(token)
  assert.equal(result.ok, false)
  assert.equal((result as { err: string }).err, err, JSON.stringify(result))
}

describe('SET verification', () => {
  it('a well-formed SET from the transmitter passes', async () => {
    const result = await verify(sign())
    assert.ok(result.ok)
    assert.equal(result.set.jti, 'set-1')
    assert.equal(result.set.eventType, CAEP_EVENT.credentialChange)
  })

  it('forged (signed by another key under the same kid) -> invalid_key', async () => {
    await refused(sign(claims(), header(), other.privateKey), 'invalid_key')
  })

  it('unsigned (alg none, any spelling) -> invalid_request', async () => {
    const unsigned = signCompact({ alg: 'none', typ: 'secevent+jwt' }, claims(), undefined)
    await refused(unsigned, 'invalid_request')
    await refused(
      signCompact({ alg: 'None', typ: 'secevent+jwt' }, claims(), undefined),
      'invalid_request',
    )
  })

  it('an algorithm not allowed (HS256 with the public key as secret) -> invalid_key', async () => {
    await refused(
      signCompact(header({ alg: 'HS256' }), claims(), Buffer.alloc(32, 1)),
      'invalid_key',
    )
  })

  it('wrong iss -> invalid_issuer; wrong aud -> invalid_audience', async () => {
    await refused(sign(claims({ iss: 'https://evil.example' })), 'invalid_issuer')
    await refused(sign(claims({ aud: 'https://other.example' })), 'invalid_audience')
    await refused(sign(claims({ aud: undefined })), 'invalid_audience')
  })

  it('an access token (no typ secevent+jwt) is not a SET -> invalid_request', async () => {
    await refused(sign(claims(), header({ typ: 'JWT' })), 'invalid_request')
    await refused(sign(claims(), header({ typ: undefined })), 'invalid_request')
  })

  it('iat in the future, too old, missing; exp passed -> invalid_request', async () => {
    await refused(sign(claims({ iat: NOW / 1000 + 120 })), 'invalid_request')
    await refused(sign(claims({ iat: NOW / 1000 - 3700 })), 'invalid_request')
    await refused(sign(claims({ iat: undefined })), 'invalid_request')
    await refused(sign(claims({ exp: NOW / 1000 - 60 })), 'invalid_request')
  })

  it('no jti, no events, two events, a non-object event -> invalid_request', async () => {
    await refused(sign(claims({ jti: undefined })), 'invalid_request')
    await refused(sign(claims({ events: undefined })), 'invalid_request')
    await refused(
      sign(
        claims({ events: { [CAEP_EVENT.credentialChange]: {}, [CAEP_EVENT.sessionRevoked]: {} } }),
      ),
      'invalid_request',
    )
    await refused(sign(claims({ events: { [CAEP_EVENT.sessionRevoked]: 'x' } })), 'invalid_request')
  })

  it('garbage and an unknown kid -> invalid_request / invalid_key', async () => {
    await refused('not a jwt', 'invalid_request')
    await refused('', 'invalid_request')
    await refused(sign(claims(), header({ kid: 'k2' })), 'invalid_key')
  })
})
