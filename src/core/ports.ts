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
}

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
