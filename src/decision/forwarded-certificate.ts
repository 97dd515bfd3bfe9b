/**
 * The client certificate a trusted proxy reports for its client (RFC 8705 binding in
 * forward-auth mode): read only from the configured proxy kind's own field
 * (proxy-kinds.ts `certificate`), never from a direct caller or another proxy's header, and
 * only as that proxy encodes it. The proxy verified the certificate against its CA (the
 * shipped examples forward it only then); tokengate checks it is one certificate.
 */
import { Buffer } from 'node:buffer'
import { X509Certificate } from 'node:crypto'
import type { PeerCertificate } from '../core/credential-kind.ts'
import { headerValues } from '../core/raw-headers.ts'
import { type CertificateEncoding, PROXY_RULES, type ProxyKind } from './proxy-kinds.ts'

export type ForwardedCertificate =
  | { readonly ok: true; readonly certificate: PeerCertificate | undefined }
  | { readonly ok: false; readonly reason: string }

const NONE: ForwardedCertificate = Object.freeze({ ok: true, certificate: undefined })

/**
 * The certificate the proxy of `kind` states: from its header in `rawHeaders`, or (Envoy's
 * gRPC ext_authz) `source`, the CheckRequest's `source.certificate`. Undefined `kind` (no
 * trusted proxy): none, whatever was sent. An empty value is none (the client sent no
 * certificate); a value given twice or unreadable is refused: the proxy is misconfigured,
 * and a guess could bind to the wrong certificate.
 */
export function readForwardedCertificate(
  kind: ProxyKind | undefined,
  rawHeaders: readonly string[],
  source?: string | undefined,
): ForwardedCertificate {
  const field = kind === undefined ? undefined : PROXY_RULES[kind].certificate
  if (field === undefined) return NONE
  let value: string | undefined
  if (field.header === undefined) value = source
  else {
    const values = headerValues(rawHeaders, field.header)
    if (values.length > 1) return { ok: false, reason: `send at most one ${field.header} header` }
    value = values[0]
  }
  if (value === undefined || value.trim() === '' || value === field.none) return NONE
  const certificate = decoded(value, field.encoding)
  return certificate === undefined
    ? { ok: false, reason: `${field.header ?? 'source.certificate'} is not a certificate` }
    : { ok: true, certificate }
}

/**
 * Decoded certificates by their forwarded text: a client's requests carry the same text, and
 * the same object keeps its thumbprint (core/certificate-binding.ts). Bounded; a full map
 * starts over.
 */
const known = new Map<string, PeerCertificate>()
const MAX_KNOWN = 1024

function decoded(value: string, encoding: CertificateEncoding): PeerCertificate | undefined {
  const cacheKey = `${encoding}\n${value}`
  const hit = known.get(cacheKey)
  if (hit !== undefined) return hit
  let certificate: PeerCertificate | undefined
  try {
    certificate = { der: new X509Certificate(bytesOf(value, encoding)).raw }
  } catch {
    return undefined
  }
  if (known.size >= MAX_KNOWN) known.clear()
  known.set(cacheKey, Object.freeze(certificate))
  return certificate
}

/**
 * - `escaped-pem`: a URL-escaped PEM certificate (nginx `$ssl_client_escaped_cert`, Envoy's
 *   `source.certificate`);
 * - `der-base64`: the DER in base64 (Caddy `{http.request.tls.client.certificate_der_base64}`);
 * - `escaped-pem-body`: the PEM's base64 body without armour or line breaks, URL-escaped,
 *   certificates comma-separated, the client's first (Traefik `passTLSClientCert` `pem: true`).
 */
function bytesOf(value: string, encoding: CertificateEncoding): Buffer | string {
  switch (encoding) {
    case 'escaped-pem':
      return decodeURIComponent(value)
    case 'der-base64':
      return strictBase64(value)
    case 'escaped-pem-body':
      return strictBase64(decodeURIComponent(value).split(',')[0] ?? '')
  }
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/

function strictBase64(text: string): Buffer {
  const compact = text.trim()
  if (!BASE64.test(compact)) throw new Error('not base64')
  return Buffer.from(compact, 'base64')
}
