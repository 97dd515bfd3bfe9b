import type { AuthResult, TokenType } from '../principal.ts'

/** What an authenticator gets with the token: the rest of the request it may read. */
export interface CredentialContext {
  /** Every `X-Tenant-Id` value, in arrival order. */
  readonly tenantIds: readonly string[]
  /** The token's SHA-256 (lowercase hex) when the caller computed it already, else undefined. */
  readonly sha256Hex: string | undefined
}

/**
 * One kind of credential (Oathkeeper's authenticators): it says which tokens are its own and
 * authenticates them. `createMaybeSyncAuthenticator` asks each kind in order and the first that
 * claims a token decides; adding a kind (an API key with its own prefix) is one module.
 *
 * `authenticate` answers without a promise when nothing had to wait (a cached lookup) and
 * never rejects for a bad token: a store that fails becomes `unavailable` (503, fail closed).
 */
export interface Authenticator {
  readonly kind: TokenType
  /** Whether the token is of this kind: the one place its form is told apart. */
  claims(token: string): boolean
  authenticate(token: string, context: CredentialContext): AuthResult | Promise<AuthResult>
}
