/**
 * Certificate-bound credentials (RFC 8705 §3) in the core: a JWT with `cnf.x5t#S256` and a
 * PAT with a stored thumbprint pass only with their certificate, on the first request and
 * from the verified-token cache; unbound credentials are unaffected. The certificates here
 * are opaque DER bytes (the thumbprint is a hash of them); test/server/tls-client-certificate
 * proves the same over a real TLS listener with CA-signed certificates.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, describe, test } from 'node:test'
import { createAuthenticator } from '../../src/core/authenticate.ts'
import {
  certificateThumbprint,
  isCertificateThumbprint,
} from '../../src/core/certificate-binding.ts'
import type { PeerCertificate } from '../../src/core/credential-kind.ts'
import { createJwtVerifier } from '../../src/core/jwt.ts'
import type { AuthResult } from '../../src/core/principal.ts'
import { failureResponse } from '../../src/http/failure-response.ts'
import { addPat, addTenant, bearer, fakeLookups } from '../helpers/core-fakes.ts'
import { createManualClock, createTestIssuer, TEST_TENANT } from '../helpers/jwt.ts'

const clock = createManualClock()
const issuer = createTestIssuer({ alg: 'ES256', clock })
const verifier = createJwtVerifier([issuer.config], { clock })
const lookups = fakeLookups()
addTenant(lookups, TEST_TENANT)
addTenant(lookups, 'acme')
const authenticate = createAuthenticator({ lookups, jwt: verifier, clock })
after(() => verifier.close())

const mine: PeerCertificate = { der: randomBytes(400) }
const other: PeerCertificate = { der: randomBytes(400) }
const myThumbprint = certificateThumbprint(mine.der)

function reasonOf(result: AuthResult): string {
  assert.equal(result.ok, false, 'expected a refusal')
  if (result.ok) throw new Error('unreachable')
  assert.equal(result.failure.code, 'invalid_token')
  return (result.failure as { reason: string }).reason
}

describe('JWT bound by cnf x5t#S256', () => {
  test('passes with its certificate, refused without one or with another: first and cached', async () => {
    const token = await issuer.sign({ cnf: { 'x5t#S256': myThumbprint } })
    const request = (peerCertificate?: PeerCertificate) => ({
      authorization: bearer(token),
      tenantIds: [TEST_TENANT],
      peerCertificate,
    })
    // Refused first, so the refusals are not decided before the token is verified and cached.
    assert.equal(reasonOf(await authenticate(request())), 'certificate_required')
    assert.equal(reasonOf(await authenticate(request(other))), 'certificate_mismatch')
    const ok = await authenticate(request(mine))
    assert.ok(ok.ok, JSON.stringify(ok))
    // From the cache: the same token, other certificates.
    assert.equal(reasonOf(await authenticate(request(other))), 'certificate_mismatch')
    assert.equal(reasonOf(await authenticate(request())), 'certificate_required')
    // The same certificate bytes in a new object (a new connection) still match.
    assert.ok((await authenticate(request({ der: Buffer.from(mine.der) }))).ok)
  })

  test('the refusal is 401 invalid_token with an RFC 6750 error_description', async () => {
    const token = await issuer.sign({ cnf: { 'x5t#S256': myThumbprint } })
    const result = await authenticate({
      authorization: bearer(token),
      tenantIds: [TEST_TENANT],
      peerCertificate: other,
    })
    if (result.ok) throw new Error('expected a refusal')
    const wire = failureResponse(result.failure, 'req-1')
    assert.equal(wire.status, 401)
    assert.match(wire.headers['www-authenticate'] ?? '', /error="invalid_token"/)
    assert.match(wire.headers['www-authenticate'] ?? '', /error_description="[^"]*certificate/)
  })

  test('a JWT without cnf is unaffected by any certificate', async () => {
    const token = await issuer.sign()
    for (const peerCertificate of [undefined, mine]) {
      const result = await authenticate({
        authorization: bearer(token),
        tenantIds: [TEST_TENANT],
        peerCertificate,
      })
      assert.ok(result.ok, JSON.stringify(result))
    }
  })

  test('a cnf tokengate cannot check is refused, never read as unbound (fail closed)', async () => {
    for (const cnf of [
      { jkt: 'abc' },
      { 'x5t#S256': myThumbprint, jkt: 'abc' },
      {},
      { 'x5t#S256': 'short' },
      { 'x5t#S256': `${myThumbprint}=` },
      'x5t',
      null,
      [myThumbprint],
    ]) {
      const token = await issuer.sign({ cnf })
      const result = await authenticate({
        authorization: bearer(token),
        tenantIds: [TEST_TENANT],
        peerCertificate: mine,
      })
      assert.equal(reasonOf(result), 'claims', JSON.stringify(cnf))
    }
  })
})

describe('PAT bound to a certificate thumbprint', () => {
  test('passes with its certificate, refused (401 invalid_token, key named) otherwise', async () => {
    const { token, record } = addPat(lookups, { patch: { certificateThumbprint: myThumbprint } })
    const request = (peerCertificate?: PeerCertificate) => ({
      authorization: bearer(token),
      tenantIds: [],
      peerCertificate,
    })
    assert.ok((await authenticate(request(mine))).ok)
    const none = await authenticate(request())
    assert.equal(reasonOf(none), 'certificate_required')
    if (!none.ok) {
      assert.deepEqual((none.failure as { key?: unknown }).key, {
        tokenId: record.id,
        tenantId: 'acme',
      })
    }
    assert.equal(reasonOf(await authenticate(request(other))), 'certificate_mismatch')
  })

  test('an unbound PAT passes with or without a certificate', async () => {
    const { token } = addPat(lookups)
    for (const peerCertificate of [undefined, mine]) {
      assert.ok(
        (await authenticate({ authorization: bearer(token), tenantIds: [], peerCertificate })).ok,
      )
    }
  })

  test('a revoked bound PAT is refused as revoked, whatever certificate', async () => {
    const { token } = addPat(lookups, {
      patch: { certificateThumbprint: myThumbprint, revokedAt: Date.now() - 1000 },
    })
    assert.equal(
      reasonOf(
        await authenticate({ authorization: bearer(token), tenantIds: [], peerCertificate: mine }),
      ),
      'revoked',
    )
  })
})

test('thumbprint format: 43 base64url characters of a SHA-256', () => {
  assert.ok(isCertificateThumbprint(myThumbprint))
  assert.equal(myThumbprint.length, 43)
  for (const bad of ['', 'a'.repeat(43), `${myThumbprint.slice(0, 42)}+`, `${myThumbprint}A`]) {
    assert.equal(isCertificateThumbprint(bad), false, bad)
  }
})
