import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, type JWK, jwtVerify } from 'jose'
import { createIdentityTokenSigner } from '../../src/auth/identity-token.ts'
import type { Principal } from '../../src/core/principal.ts'
import { createManualClock } from '../helpers/jwt.ts'

const SETTINGS = {
  issuer: 'tokengate',
  audience: 'orders-api',
  ttlSec: 60,
  algorithm: 'ES256',
  rotateAfterSec: 3600,
  publishAheadSec: 600,
} as const

const UPSTREAM = 'https://orders.internal'

const principal = (): Principal => ({
  tokenType: 'jwt',
  tenantId: 'tenant-a',
  subject: 'user-1',
  permissions: ['orders:read'],
  tokenId: undefined,
  expiresAt: null,
  fingerprint: 'jwt:test',
})

const dir = mkdtempSync(join(tmpdir(), 'tokengate-idt-'))
after(() => rmSync(dir, { recursive: true, force: true }))

async function verifies(token: string, jwks: { keys: JWK[] }, atMs: number): Promise<boolean> {
  try {
    await jwtVerify(token, createLocalJWKSet(jwks), {
      issuer: 'tokengate',
      audience: 'orders-api',
      currentDate: new Date(atMs),
    })
    return true
  } catch {
    return false
  }
}

test('rotation: the next key is published before it signs, the old one stays until its tokens expire', async () => {
  const clock = createManualClock()
  const file = join(dir, 'rotation.json')
  const signer = await createIdentityTokenSigner(SETTINGS, file, clock)
  assert.equal(statSync(file).mode & 0o777, 0o600)
  const first = await signer.sign(principal(), UPSTREAM)
  const kidA = decodeProtectedHeader(first).kid
  assert.equal(signer.jwks().keys.length, 1)

  // Within publishAheadSec of the rotation age: the next key appears, but does not sign yet.
  clock.advance(3000_000)
  const beforeSwitch = await signer.sign(principal(), UPSTREAM)
  assert.equal(decodeProtectedHeader(beforeSwitch).kid, kidA)
  const cachedByUpstream = signer.jwks()
  assert.equal(cachedByUpstream.keys.length, 2)

  // The last token of the old key, one second before the switch.
  clock.advance(599_000)
  const lastOld = await signer.sign(principal(), UPSTREAM)
  assert.equal(decodeProtectedHeader(lastOld).kid, kidA)

  // The switch: an upstream still holding the JWKS fetched 10 minutes ago accepts the new key.
  clock.advance(1_000)
  const afterSwitch = await signer.sign(principal(), UPSTREAM)
  const kidB = decodeProtectedHeader(afterSwitch).kid
  assert.notEqual(kidB, kidA)
  assert.ok(await verifies(afterSwitch, cachedByUpstream, clock.now()))

  // Until it expires, the old key's last token verifies with a JWKS fetched after the switch.
  clock.advance(58_000)
  await signer.sign(principal(), UPSTREAM)
  assert.ok(await verifies(lastOld, signer.jwks(), clock.now()))

  // Once every token of the old key has expired (ttl + a minute of skew), it is withdrawn.
  clock.advance(63_000)
  await signer.sign(principal(), UPSTREAM)
  assert.deepEqual(
    signer.jwks().keys.map((key) => key.kid),
    [kidB],
  )
})

test("every token has its own jti and never outlives its lifetime or the caller's token", async () => {
  const clock = createManualClock()
  const signer = await createIdentityTokenSigner(SETTINGS, join(dir, 'fresh.json'), clock)
  const caller = principal()
  const first = decodeJwt(await signer.sign(caller, UPSTREAM))
  const second = decodeJwt(await signer.sign(caller, UPSTREAM))
  assert.notEqual(first.jti, second.jti)
  assert.equal(first.exp, Math.floor(clock.now() / 1000) + 60)

  const shortLived = { ...principal(), expiresAt: clock.now() + 10_000 }
  const bounded = await signer.sign(shortLived, UPSTREAM)
  const { payload } = await jwtVerify(bounded, createLocalJWKSet(signer.jwks()), {
    currentDate: new Date(clock.now()),
  })
  assert.equal(payload.exp, Math.floor((clock.now() + 10_000) / 1000))
})

test("aud is the upstream's, unless identityToken.audience fixes one; never absent", async () => {
  const clock = createManualClock()
  const { audience: _fixed, ...perUpstream } = SETTINGS
  const signer = await createIdentityTokenSigner(perUpstream, join(dir, 'aud.json'), clock)
  const forA = await signer.sign(principal(), 'https://a.internal')
  const jwks = createLocalJWKSet(signer.jwks())
  const at = { currentDate: new Date(clock.now()) }
  await jwtVerify(forA, jwks, { ...at, audience: 'https://a.internal' })
  await assert.rejects(jwtVerify(forA, jwks, { ...at, audience: 'https://b.internal' }), {
    code: 'ERR_JWT_CLAIM_VALIDATION_FAILED',
  })
  await assert.rejects(signer.sign(principal(), undefined), /no audience/)
  const fixed = await createIdentityTokenSigner(SETTINGS, join(dir, 'aud.json'), clock)
  assert.equal(decodeJwt(await fixed.sign(principal(), 'https://a.internal')).aud, 'orders-api')
})

test('instances sharing the key file sign with the same key', async () => {
  const clock = createManualClock()
  const file = join(dir, 'shared.json')
  const one = await createIdentityTokenSigner({ ...SETTINGS, algorithm: 'EdDSA' }, file, clock)
  const two = await createIdentityTokenSigner({ ...SETTINGS, algorithm: 'EdDSA' }, file, clock)
  const kid = (token: string) => decodeProtectedHeader(token).kid
  assert.equal(
    kid(await one.sign(principal(), UPSTREAM)),
    kid(await two.sign(principal(), UPSTREAM)),
  )
  assert.deepEqual(one.jwks(), two.jwks())
})
