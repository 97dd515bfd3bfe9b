/**
 * What the gate is asked and what it answers (gate.ts), as plain values every front end and
 * the outcome recorder share.
 */
import type { PeerCertificate } from '../core/credential-kind.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { Principal } from '../core/principal.ts'
import type { FailureResponse } from '../http/failure-response.ts'
import type { ProblemDetails } from '../http/problem.ts'
import type { PolicyMatcher } from './policy/matcher.ts'

/** One request as every front end hands it to the gate, free of any framework. */
export interface GateRequest {
  readonly method: string
  /** The origin-form request target as received: the path and an optional query. */
  readonly target: string
  /** Every `Authorization` value, in arrival order (duplicates are refused, not resolved). */
  readonly authorization: readonly string[]
  /** Every `X-Tenant-Id` value, in arrival order. */
  readonly tenantIds: readonly string[]
  /** The client's address (the peer, or what a trusted proxy reports). */
  readonly clientAddress: string
  /**
   * Every header as Node's `rawHeaders` (`[name, value, ...]`), for a registered credential
   * kind that reads its own header. Omitted: the kinds see only the two above.
   */
  readonly headers?: readonly string[] | undefined
  /** The client certificate of a TLS connection, or as the configured proxy reports it. */
  readonly peerCertificate?: PeerCertificate | undefined
  readonly requestId: string
  /** What the route requires; none: any authenticated caller. */
  readonly access?: Access | undefined
}

/**
 * What a request must be allowed: a built-in or application route's permissions (all must be
 * held), or the gateway's route policy for a request bound upstream (which also gets the
 * identity headers; `audience` names that upstream, the identity token's `aud` unless
 * `identityToken.audience` is configured).
 */
export type Access =
  | { readonly permissions: readonly string[] }
  | {
      readonly policy: PolicyMatcher
      readonly identity?: boolean
      readonly audience?: string | undefined
    }

export interface Allowed {
  readonly allowed: true
  readonly principal: Principal
  /** Headers for the caller's response (the RateLimit pair), lowercase names. */
  readonly headers: Readonly<Record<string, string>>
  /** For a request bound upstream: `X-Auth-*` identity headers (and `x-auth-token`). */
  readonly identity: Readonly<Record<string, string>> | undefined
}

export interface Refused extends FailureResponse {
  readonly allowed: false
  readonly failure: AuthFailure
  /** The caller, when the refusal came after authentication (a 403, a 429 per token). */
  readonly principal: Principal | null
  readonly body: ProblemDetails
}

export type Outcome = Allowed | Refused
