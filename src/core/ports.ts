/**
 * What the core needs from the outside world, as narrow interfaces. The stores, the server
 * and the tests implement them; the core never imports a driver or a framework.
 */

/** Milliseconds since the epoch. Injected so tests control time. */
export interface Clock {
  now(): number
}

export const systemClock: Clock = { now: () => Date.now() }

export interface Tenant {
  /** The exact `X-Tenant-Id` value: compared byte for byte, no trimming, case-sensitive. */
  readonly id: string
  readonly name: string
  readonly enabled: boolean
  readonly createdAt: number
  /**
   * The tenant's own request rate across all its tokens, replacing `rateLimit.perTenant`;
   * null or absent: the default. Stores always return it.
   */
  readonly rateLimit?: RateLimitOverride | null | undefined
}

/** A request rate of one key or tenant that replaces the configured default. */
export interface RateLimitOverride {
  /** Requests per window, at least 1. */
  readonly max: number
  /** Window length in seconds, 1 to 86,400. */
  readonly windowSec: number
}

/** When a quota's uses come back: never, each UTC day or month, or every `intervalSec`. */
export type QuotaRefill = 'none' | 'daily' | 'monthly' | 'interval'

/**
 * A PAT's quota: at most `limit` uses per period (in all, without refill). An exhausted key
 * stays valid and is refused with 429 `quota_exhausted` until its next refill.
 */
export interface Quota {
  readonly limit: number
  readonly refill: QuotaRefill
  /** `interval` only: the period in seconds (60 s to 366 days). */
  readonly intervalSec?: number | undefined
  /** `interval` only: periods start at this time (epoch ms) plus whole intervals. */
  readonly anchorAt?: number | undefined
  /**
   * When an operator last reset its uses (epoch ms): a quota changed in any way, this included,
   * makes every instance drop the uses it had reserved for the key.
   */
  readonly resetAt?: number | undefined
  /**
   * The usage counter the quota is counted in: the id of the first token of the rotation
   * family, so that rotating a key keeps its count (a rotation is no refill).
   */
  readonly counter: string
}

/** What a PAT carries beyond the defaults: its own rate limit and its quota. */
export interface KeyLimits {
  readonly rateLimit: RateLimitOverride | null
  readonly quota: Quota | null
}

/** A stored Personal Access Token. The plaintext token is never stored: only its SHA-256. */
export interface PatRecord {
  readonly id: string
  /** Lowercase hex SHA-256 of the whole token string (`pat_...`). */
  readonly tokenHash: string
  readonly tenantId: string
  readonly subject: string
  readonly name: string
  readonly permissions: readonly string[]
  /** The last 4 characters of the token, for display (`pat_…abcd`). */
  readonly last4: string
  readonly createdAt: number
  readonly expiresAt: number | null
  readonly revokedAt: number | null
  readonly lastUsedAt: number | null
  /** Id of the token this one replaced by rotation, if any (rotation family). */
  readonly rotatedFrom: string | null
  /**
   * When this token was rotated out (replaced by a token whose `rotatedFrom` is this id);
   * null or absent while it is current. Stores always return it.
   */
  readonly supersededAt?: number | null | undefined
  /**
   * End of the rotation grace period: a rotated-out token keeps working while `now` is
   * before it, then is refused with `invalid_token` / `rotated` (reuse detection).
   */
  readonly graceUntil?: number | null | undefined
  /**
   * When the key was disabled (refused with 401 like an invalid token, but kept, and enabled
   * again by an operator); null or absent while enabled. Stores always return the fields below.
   */
  readonly disabledAt?: number | null | undefined
  /** The key's own request rate, replacing `rateLimit.perToken`; null: the default. */
  readonly rateLimit?: RateLimitOverride | null | undefined
  /** The key's quota of uses; null: none. */
  readonly quota?: Quota | null | undefined
  /** Operator-defined JSON object (at most `MAX_METADATA_BYTES`), never read by the gate. */
  readonly metadata?: Readonly<Record<string, unknown>> | null | undefined
  /** The operator's own id for the key (a customer or account id), searchable; not unique. */
  readonly externalId?: string | null | undefined
  /**
   * The `x5t#S256` thumbprint of the client certificate the key is bound to (RFC 8705): the
   * key is refused without that certificate. Null or absent: not bound.
   */
  readonly certificateThumbprint?: string | null | undefined
}

/** The largest `metadata` of a PAT, as UTF-8 JSON. */
export const MAX_METADATA_BYTES = 4096

/**
 * The lookups authentication needs. Implementations may throw (or reject) when the backing
 * store is unreachable; the core turns that into an `unavailable` failure (503), never a
 * pass. They may answer synchronously (a cache hit) or with a promise; the core takes both.
 */
export interface AuthLookups {
  findPatByHash(tokenHash: string): PatRecord | undefined | Promise<PatRecord | undefined>
  findTenant(id: string): Tenant | undefined | Promise<Tenant | undefined>
}

/** What a verified JWT vouches for, after every signature and claim rule has passed. */
export interface VerifiedJwt {
  readonly issuer: string
  readonly subject: string
  /** From the issuer's tenant claim (must be a non-empty string), or its fixed tenant. */
  readonly tenantId: string
  readonly permissions: readonly string[]
  readonly tokenId: string | undefined
  /** `exp` in epoch milliseconds. */
  readonly expiresAt: number
  readonly keyId: string | undefined
  /** `iat` in epoch milliseconds, when the token has one (revocation rules' time bound). */
  readonly issuedAt?: number | undefined
  /** `sid` (OpenID session id), when a string (revocation rules by session). */
  readonly sessionId?: string | undefined
  /** The SHA-256 digest of the client certificate the token is bound to (`cnf.x5t#S256`). */
  readonly certificateDigest?: Uint8Array | undefined
}

export type JwtOutcome =
  | { readonly ok: true; readonly jwt: VerifiedJwt }
  | { readonly ok: false; readonly failure: import('./failure.ts').AuthFailure }

/** Verifies JWT access tokens against the trusted issuers. Never throws for a bad token. */
export interface JwtVerifier {
  verify(token: string): Promise<JwtOutcome>
  /**
   * The same verification, answered without a promise when nothing has to be awaited (a
   * verified-token cache hit or a static key; a JWKS key is always resolved asynchronously,
   * so a JWKS-signed token costs one promise until it is cached): the server's request path
   * uses it so a JWT request goes on in the same tick, as a cached PAT does. Optional for custom
   * verifiers; `verify` is used when it is absent. `sha256Hex`: the token's SHA-256 when the
   * caller has computed it already (the verified-token cache key), so it is not hashed again.
   */
  verifyMaybeSync?(token: string, sha256Hex?: string): JwtOutcome | Promise<JwtOutcome>
  /** Stops timers and drops caches. */
  close(): void
}
