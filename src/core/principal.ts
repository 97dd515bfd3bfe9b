/**
 * The name of the credential kind that authenticated the caller (`credential-kind.ts`):
 * `pat` or `jwt` built in, or a registered kind's name.
 */
export type TokenType = string

/**
 * The authenticated caller. Built by the core after every 401 rule has passed;
 * the permission rule (403) is applied to it afterwards.
 */
export interface Principal {
  readonly tokenType: TokenType
  /** The tenant this caller acts for: the PAT's tenant, or the JWT's tenant claim. */
  readonly tenantId: string
  /** The PAT's subject, or the JWT's `sub`. */
  readonly subject: string
  readonly permissions: readonly string[]
  /** PAT id, or the JWT's `jti` when present (otherwise undefined). */
  readonly tokenId: string | undefined
  /** Expiry in epoch milliseconds; null for a PAT that never expires. */
  readonly expiresAt: number | null
  /** JWT only: the `iss` of the trusted issuer that vouched for it. */
  readonly issuer?: string
  /** A log-safe fingerprint of the token (see `fingerprint.ts`); never the token. */
  readonly fingerprint: string
  /** PAT only: the key's own rate limit and quota, when it has either. */
  readonly limits?: import('./ports.ts').KeyLimits | undefined
}

export type AuthResult =
  | { readonly ok: true; readonly principal: Principal }
  | {
      readonly ok: false
      readonly failure: import('./failure.ts').AuthFailure
      /** The kind that claimed the refused request and its credential (kept only in memory). */
      readonly claimed?: { readonly kind: string; readonly credential: string } | undefined
    }
