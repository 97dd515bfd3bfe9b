/**
 * Credential kinds as registered plug-ins (Oathkeeper's authenticators, written our way).
 * A kind claims a request or passes, authenticates what it claimed, and describes itself:
 * its name (the principal's `tokenType`, the metric and trace label), the fingerprint of a
 * refused credential, the rate limiter's per-caller key, its challenge scheme and the stored
 * key a caller's use is counted against. Nothing outside a kind's own file tells kinds apart.
 *
 * PAT and JWT are the two built-in registrations; `registerCredentialKind`
 * (`credential-kinds.ts`) adds another (an API-key header, a certificate) to every
 * authenticator built afterwards and to the limiter, recorder and challenges, on every
 * front end.
 */
import type { AuthLookups, Clock, JwtVerifier } from './ports.ts'
import type { AuthResult, Principal } from './principal.ts'

/** The client certificate of a TLS connection (or as a configured proxy reports it). */
export interface PeerCertificate {
  /** The certificate, DER-encoded. */
  readonly der: Uint8Array
}

/**
 * What a kind may read of a request: every header, the peer, the target. It may be the gate's
 * own request object (no copy per request, issue #36), with more members than these: a kind
 * reads only what is declared here and never changes it.
 */
export interface CredentialRequest {
  /** Every `Authorization` value, in arrival order. */
  readonly authorization: readonly string[]
  /** Every `X-Tenant-Id` value, in arrival order. */
  readonly tenantIds: readonly string[]
  /** Every header as Node's `rawHeaders`: `[name, value, name, value, ...]`; read with `headerValues`. */
  readonly headers?: readonly string[] | undefined
  /** The origin-form request target. */
  readonly target?: string | undefined
  /** The client's address. */
  readonly clientAddress?: string | undefined
  /** The client certificate, when the connection (or a trusted proxy) presented one. */
  readonly peerCertificate?: PeerCertificate | undefined
}

/** What a kind's `authenticate` gets beside the credential. */
export interface CredentialContext {
  /** Every `X-Tenant-Id` value, in arrival order. */
  readonly tenantIds: readonly string[]
  /** The credential's SHA-256 (lowercase hex) when the caller computed it already, else undefined. */
  readonly sha256Hex: string | undefined
  /** The whole request, for a kind that binds its credential to more than a header. */
  readonly request: CredentialRequest
}

/** One built kind: claims and authenticates with the dependencies it was built with. */
export interface Authenticator {
  readonly kind: string
  /**
   * The credential this kind owns in the request, or undefined to pass. `bearer` is the
   * request's `Authorization: Bearer` token when the header is exactly one valid one.
   */
  claim(request: CredentialRequest, bearer: string | undefined): string | undefined
  /** Never rejects for a bad credential; a failing store is `unavailable` (503, fail closed). */
  authenticate(credential: string, context: CredentialContext): AuthResult | Promise<AuthResult>
}

/** What every kind is built with. */
export interface KindDeps {
  readonly lookups: AuthLookups
  readonly jwt: JwtVerifier
  readonly clock: Clock
}

export interface CredentialKind {
  /** The principal's `tokenType`, the metric and trace label. Unique. */
  readonly name: string
  /**
   * A kind asked last (JWT: it claims every bearer token no other kind claimed). A kind
   * registered later is inserted before the fallback kinds.
   */
  readonly fallback?: boolean | undefined
  /** The `WWW-Authenticate` scheme of its refusals; `Bearer` unless given. */
  readonly challengeScheme?: string | undefined
  create(deps: KindDeps): Authenticator
  /** A log-safe identifier of a credential of this kind (never the credential). */
  fingerprint(credential: string, sha256Hex?: string): string
  /** The rate limiter's per-caller key of one of its principals (never the credential). */
  limiterKey(principal: Principal): string
  /** The stored key a principal's use is counted against (audit, usage, last used), if any. */
  storedKeyId(principal: Principal): string | undefined
}
