import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import { createLocalJWKSet, decodeProtectedHeader, type JWK, jwtVerify } from 'jose'
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
  const first = await signer.sign(principal())
  const kidA = decodeProtectedHeader(first).kid
  assert.equal(signer.jwks().keys.length, 1)

  // Within publishAheadSec of the rotation age: the next key appears, but does not sign yet.
  clock.advance(3000_000)
  const beforeSwitch = await signer.sign(principal())
  assert.equal(decodeProtectedHeader(beforeSwitch).kid, kidA)
  const cachedByUpstream = signer.jwks()
  assert.equal(cachedByUpstream.keys.length, 2)

  // The last token of the old key, one second before the switch.
  clock.advance(599_000)
  const lastOld = await signer.sign(principal())
  assert.equal(decodeProtectedHeader(lastOld).kid, kidA)

  // The switch: an upstream still holding the JWKS fetched 10 minutes ago accepts the new key.
  clock.advance(1_000)
  const afterSwitch = await signer.sign(principal())
  const kidB = decodeProtectedHeader(afterSwitch).kid
  assert.notEqual(kidB, kidA)
  assert.ok(await verifies(afterSwitch, cachedByUpstream, clock.now()))

  // Until it expires, the old key's last token verifies with a JWKS fetched after the switch.
  clock.advance(58_000)
  await signer.sign(principal())
  assert.ok(await verifies(lastOld, signer.jwks(), clock.now()))

  // Once every token of the old key has expired (ttl + a minute of skew), it is withdrawn.
  clock.advance(63_000)
  await signer.sign(principal())
  assert.deepEqual(
    signer.jwks().keys.map((key) => key.kid),
    [kidB],
  )
})

test('a token is reused for the same principal until half its lifetime, and never outlives it', async () => {
  const clock = createManualClock()
  const signer = await createIdentityTokenSigner(SETTINGS, join(dir, 'reuse.json'), clock)
  const caller = principal()
  const token = await signer.sign(caller)
  clock.advance(29_000)
  assert.equal(await signer.sign(caller), token)
  clock.advance(2_000)
  assert.notEqual(await signer.sign(caller), token)

  const shortLived = { ...principal(), expiresAt: clock.now() + 10_000 }
  const bounded = await signer.sign(shortLived)
  const { payload } = await jwtVerify(bounded, createLocalJWKSet(signer.jwks()), {
    currentDate: new Date(clock.now()),
  })
  assert.equal(payload.exp, Math.floor((clock.now() + 10_000) / 1000))
})

test('instances sharing the key file sign with the same key', async () => {
  const clock = createManualClock()
  const file = join(dir, 'shared.json')
  const one = await createIdentityTokenSigner({ ...SETTINGS, algorithm: 'EdDSA' }, file, clock)
  const two = await createIdentityTokenSigner({ ...SETTINGS, algorithm: 'EdDSA' }, file, clock)
  const kid = (token: string) => decodeProtectedHeader(token).kid
  assert.equal(kid(await one.sign(principal())), kid(await two.sign(principal())))
  assert.deepEqual(one.jwks(), two.jwks())
})

test('a PAT caller, whose principal is built per request, reuses its token like any principal', async () => {
  const clock = createManualClock()
  const signer = await createIdentityTokenSigner(SETTINGS, join(dir, 'pat-reuse.json'), clock)
  const pat = (permissions = ['orders:read']): Principal => ({
    tokenType: 'pat',
    tenantId: 'tenant-a',
    subject: 'ci-bot',
    permissions,
    tokenId: 'tok_1',
    expiresAt: null,
    fingerprint: 'pat_…abcd',
  })
  const token = await signer.sign(pat())
  clock.advance(29_000)
  assert.equal(await signer.sign(pat()), token, 'a new principal object of the same PAT')
  // Anything the token states differs: a new token, never the cached one.
  assert.notEqual(await signer.sign(pat(['orders:read', 'orders:write'])), token)
  assert.notEqual(await signer.sign({ ...pat(), subject: 'other' }), token)
  assert.notEqual(await signer.sign({ ...pat(), tenantId: 'tenant-b' }), token)
  assert.notEqual(await signer.sign({ ...pat(), expiresAt: clock.now() + 10_000 }), token)
  const { payload } = await jwtVerify(await signer.sign(pat()), createLocalJWKSet(signer.jwks()), {
    currentDate: new Date(clock.now()),
  })
  assert.deepEqual(
    [payload.sub, payload.tenant_id, payload.token_id, payload.permissions],
    ['ci-bot', 'tenant-a', 'tok_1', ['orders:read']],
  )
  clock.advance(2_000)
  assert.notEqual(await signer.sign(pat()), token, 'past half its lifetime')
})
