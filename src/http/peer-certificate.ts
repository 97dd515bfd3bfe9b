import type { Socket } from 'node:net'
import type { TLSSocket } from 'node:tls'
import type { PeerCertificate } from '../core/credential-kind.ts'

/**
 * The client certificate of a TLS connection, for the credential kinds (`GateRequest`):
 * undefined on a plain connection, when the client sent none, or when it did not verify
 * against the listener's CA. Why `authorized` and not merely present: with
 * `rejectUnauthorized: false` (client certificates optional) a client may present any
 * self-made certificate, and a binding proves nothing unless the CA vouched for it.
 * Only a direct TLS peer's; behind a proxy the certificate comes from that proxy's own
 * header family (decision/proxy-kinds.ts).
 */
export function peerCertificateOf(
  socket: Pick<Socket, 'remoteAddress'> | undefined,
): PeerCertificate | undefined {
  if (socket === undefined || (socket as Partial<TLSSocket>).encrypted !== true) return undefined
  const tls = socket as TLSSocket
  // One object per connection, so its thumbprint is computed once (core/certificate-binding.ts).
  const known = certificates.get(tls)
  if (known !== undefined) return known ?? undefined
  let certificate: PeerCertificate | null = null
  if (tls.authorized === true) {
    const raw = tls.getPeerCertificate(false)?.raw
    if (raw !== undefined && raw.length > 0) certificate = Object.freeze({ der: raw })
  }
  certificates.set(tls, certificate)
  return certificate ?? undefined
}

const certificates = new WeakMap<TLSSocket, PeerCertificate | null>()
