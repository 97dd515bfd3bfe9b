/**
 * Certificate-bound credentials (RFC 8705 §3): a JWT's `cnf` claim `x5t#S256`, or a PAT's
 * stored thumbprint, names the one client certificate the credential may be used with. The
 * binding is a proof added to the Bearer token, never another scheme: without the matching
 * certificate the token is refused like any invalid one (401 `invalid_token`).
 */
import { Buffer } from 'node:buffer'
import { hash, timingSafeEqual } from 'node:crypto'
import type { PeerCertificate } from './credential-kind.ts'
import type { AuthFailure } from './failure.ts'

/** base64url (no padding) of a SHA-256 digest: 43 characters, the last one of 16. */
const THUMBPRINT = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/

/** Whether `value` is a well-formed `x5t#S256` thumbprint (base64url SHA-256, unpadded). */
export function isCertificateThumbprint(value: string): boolean {
  return THUMBPRINT.test(value)
}

/** The `x5t#S256` thumbprint of a DER certificate. */
export function certificateThumbprint(der: Uint8Array): string {
  return hash('sha256', der, 'base64url')
}

/**
 * The 32 digest bytes of a peer certificate, hashed once per certificate object: the
 * bindings hand the same object for every request of a connection (http/peer-certificate.ts).
 */
const digests = new WeakMap<PeerCertificate, Buffer>()
function peerDigest(certificate: PeerCertificate): Buffer {
  let digest = digests.get(certificate)
  if (digest === undefined) {
    digest = hash('sha256', certificate.der, 'buffer')
    digests.set(certificate, digest)
  }
  return digest
}

/** The digest bytes of a thumbprint, decoded once where it is stored (a verified JWT, a PAT record). */
export function thumbprintDigest(thumbprint: string): Buffer {
  return Buffer.from(thumbprint, 'base64url')
}

/**
 * The RFC 8705 §3 check: undefined when the request's certificate is the bound one, else the
 * 401 `invalid_token` refusal (reason `certificate_required` or `certificate_mismatch`).
 * Constant-time over the digest, so a caller learns nothing from the timing.
 */
export function checkCertificateBinding(
  boundDigest: Uint8Array,
  certificate: PeerCertificate | undefined,
): AuthFailure | undefined {
  if (certificate === undefined) return CERTIFICATE_REQUIRED
  const presented = peerDigest(certificate)
  if (presented.length === boundDigest.length && timingSafeEqual(presented, boundDigest)) {
    return undefined
  }
  return CERTIFICATE_MISMATCH
}

const CERTIFICATE_REQUIRED: AuthFailure = Object.freeze({
  code: 'invalid_token',
  reason: 'certificate_required',
  detail: 'The access token is bound to a client certificate, and none was presented.',
})
const CERTIFICATE_MISMATCH: AuthFailure = Object.freeze({
  code: 'invalid_token',
  reason: 'certificate_mismatch',
  detail: 'The access token is bound to another client certificate than the one presented.',
})

/**
 * Reads a JWT's confirmation claim (RFC 7800 `cnf`): absent → `null` (not bound); an object
 * whose one member is a well-formed `x5t#S256` → its thumbprint; anything else → undefined,
 * and the token is refused: a binding tokengate cannot check must not be read as none.
 */
export function readConfirmation(cnf: unknown): string | null | undefined {
  if (cnf === undefined) return null
  if (typeof cnf !== 'object' || cnf === null || Array.isArray(cnf)) return undefined
  // Another confirmation method beside it (a DPoP `jkt`) would go unchecked: refused too.
  const members = Object.keys(cnf)
  if (members.length !== 1 || members[0] !== 'x5t#S256') return undefined
  const thumbprint = (cnf as Record<string, unknown>)['x5t#S256']
  return typeof thumbprint === 'string' && isCertificateThumbprint(thumbprint)
    ? thumbprint
    : undefined
}
