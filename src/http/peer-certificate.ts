import type { Socket } from 'node:net'
import type { TLSSocket } from 'node:tls'
import type { PeerCertificate } from '../core/credential-kind.ts'

/**
 * The client certificate of a TLS connection, for the credential kinds (`GateRequest`):
 * undefined on a plain connection or when the client sent none. Only a direct TLS peer's;
 * behind a proxy the certificate comes from that proxy's own header family.
 */
export function peerCertificateOf(
  socket: Pick<Socket, 'remoteAddress'> | undefined,
): PeerCertificate | undefined {
  if (socket === undefined || (socket as Partial<TLSSocket>).encrypted !== true) return undefined
  const raw = (socket as TLSSocket).getPeerCertificate(false)?.raw
  return raw === undefined || raw.length === 0 ? undefined : { der: raw }
}
