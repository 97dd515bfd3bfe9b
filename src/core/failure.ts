/**
 * Every way authentication or authorization can fail, as one value.
 *
 * `code` is the public, stable snake_case code of DESIGN.md; it appears in the problem body
 * and in logs. The extra fields (`reason`, `detail`) are for logs and for a client-safe
 * `detail` string; none of them may ever contain a token.
 *
 * Expected outcomes, including a dependency being down, are values; only bugs throw.
 * `src/http/failure-response.ts` is the single place a failure becomes wire format.
 */
export type AuthFailure =
  /** SPEC §5.3 rule 3: no `Authorization` header at all. */
  | { code: 'missing_authorization' }
  /** DESIGN rule 2: not exactly `Bearer <b64token>`, or more than one header. */
  | { code: 'malformed_authorization'; detail: string }
  /** SPEC §5.3 rule 4: unknown, revoked, forged, or otherwise unacceptable token. */
  | {
      code: 'invalid_token'
      reason: InvalidTokenReason
      detail: string
      /**
       * The stored token's id, set only with reason `rotated`, so the caller outside the
       * core can revoke the token's rotation family (reuse detection) as a side effect.
       */
      tokenId?: string
      key?: RefusedKey
      /** With reason `revoked_by_rule`: the JWT revocation rule that refused it (audited). */
      ruleId?: string
    }
  /** SPEC §5.3 rule 4: a token past its expiry. */
  | { code: 'token_expired'; detail: string; key?: RefusedKey }
  /** SPEC §5.3 rule 1: a JWT without `X-Tenant-Id`. */
  | { code: 'tenant_header_required' }
  /** SPEC §5.3 rule 1 (and DESIGN rule 4 for PATs): `X-Tenant-Id` is not the caller's tenant. */
  | { code: 'tenant_mismatch'; detail: string; key?: RefusedKey }
  /**
   * RFC 6750 §2: the token was sent in more than one way (the header and an `access_token`
   * query parameter or form field). Found by the HTTP front ends, not the core (400).
   */
  | { code: 'invalid_request'; detail: string }
  /**
   * SPEC §5.3 rule 5: authenticated, but a required permission is not held. `policyLine`:
   * the gateway policy rule that required it (absent for a built-in route's permissions).
   */
  | { code: 'insufficient_permission'; required: readonly string[]; policyLine?: number }
  /** Fail closed: a store or key source needed to decide is unreachable (503, never a pass). */
  | { code: 'unavailable'; dependency: 'store' | 'jwks'; retryAfterSeconds: number }
  /** A limit is exhausted: per token, per tenant, or failed authentications per address (429). */
  | { code: 'rate_limited'; limit: LimitState }
  /**
   * A valid key whose quota of uses is spent (429, never a 401: the key is fine, it is out of
   * uses until its next refill).
   */
  | { code: 'quota_exhausted'; quota: QuotaState }
  /**
   * The route policy denies the route (a `deny` rule, `default: deny`, or a built-in route's
   * name the gateway never proxies): answered exactly like an unknown path (404).
   */
  | { code: 'route_denied'; policyLine?: number }
  /** The policy rule's tenant path segment names a tenant other than the caller's (403). */
  | { code: 'tenant_path_mismatch'; policyLine: number }
  /** A path the policy refuses to interpret (`..`, `%2F`, `//`): 400, never guessed at. */
  | { code: 'bad_path'; detail: string }

export type InvalidTokenReason =
  | 'malformed'
  | 'bad_checksum'
  | 'unknown_token'
  | 'revoked'
  /** A JWT refused by an operator's revocation rule (jwt-revocations.ts). */
  | 'revoked_by_rule'
  /** A PAT rotated out and used after its grace period: treated as reuse of a leaked token. */
  | 'rotated'
  | 'bad_signature'
  | 'unknown_issuer'
  | 'unknown_key'
  /** The issuer's JWKS publishes the token's key, but it cannot be used (jwks.ts). */
  | 'unusable_key'
  /** The token's key was in an earlier read of the issuer's JWKS and is gone from the last. */
  | 'withdrawn_key'
  | 'algorithm_not_allowed'
  | 'claims'
  | 'not_yet_valid'
  | 'lifetime_exceeded'
  | 'tenant_unknown'
  | 'tenant_disabled'
  /** A PAT an operator disabled (kept, and may be enabled again). */
  | 'disabled'
  /** A certificate-bound token (RFC 8705) sent without a client certificate. */
  | 'certificate_required'
  /** A certificate-bound token sent with another client certificate than its own. */
  | 'certificate_mismatch'

export type FailureCode = AuthFailure['code']

/**
 * One limit's state for one request, as the IETF RateLimit header fields describe it
 * (draft-ietf-httpapi-ratelimit-headers): the 429's headers, or those of an allowed request.
 */
export interface LimitState {
  /** Limit name, e.g. `per-token`: `[a-z-]` only, so it is a valid sf-string as is. */
  readonly name: string
  /** Requests allowed per window. */
  readonly quota: number
  readonly windowSec: number
  /** Requests left in the current window (0 when exceeded). */
  readonly remaining: number
  /** Seconds until the current window ends (≥ 1 while a window is open). */
  readonly resetSec: number
}

/** An exhausted quota, for the 429's `Retry-After` and body. */
export interface QuotaState {
  /** Uses allowed per period. */
  readonly limit: number
  readonly refill: 'none' | 'daily' | 'monthly' | 'interval'
  /** When the next period starts (epoch ms); null without refill. */
  readonly resetsAt: number | null
  /** Seconds until `resetsAt`, at least 1; undefined without refill. */
  readonly retryAfterSec: number | undefined
}

/**
 * The stored key a refused PAT is (revoked, expired, disabled, of a disabled tenant, sent with
 * another tenant's X-Tenant-Id): usage is counted against it. Never shown to the caller.
 */
export interface RefusedKey {
  readonly tokenId: string
  readonly tenantId: string
}
