/**
 * A trusted JWT issuer: who may sign access tokens, with which keys and algorithms, and
 * where the tenant and permissions are found in its tokens. Stored by the operator
 * (`tokengate issuer add`); plain data, so every store can persist it as JSON.
 */
export interface IssuerConfig {
  /** Exact `iss` value. */
  readonly issuer: string
  /** Accepted `aud` values; a token must name at least one. */
  readonly audiences: readonly string[]
  readonly keySource: KeySource
  /**
   * Algorithm allowlist. Default: RS256, PS256, ES256, EdDSA. HS* only when the key source
   * is an explicit shared secret. `none` is never accepted, whatever is configured. JWKS keys
   * without `alg` are bound under it: an RSA key to each RS*, PS* algorithm listed, EC and
   * Ed25519 keys to their one algorithm if listed (`bindIssuerJwk`).
   */
  readonly algorithms?: readonly string[] | undefined
  /** Where the caller's tenant comes from. Default `{ claim: 'tenant_id' }`. */
  readonly tenant?: { readonly claim: string } | { readonly fixed: string } | undefined
  /** Claim carrying permissions. Default `permissions`. */
  readonly permissionsClaim?: string | undefined
  /**
   * The one type the permissions claim may have: `array` (of strings) or `space-delimited`
   * (one OAuth scope string). Default from the claim name: `scope`/`scp` space-delimited,
   * anything else array. A claim of the other type is a 401, never read leniently.
   */
  readonly permissionsFormat?: PermissionsFormat | undefined
}

export type PermissionsFormat = 'array' | 'space-delimited'
export const PERMISSIONS_FORMATS: readonly PermissionsFormat[] = ['array', 'space-delimited']

/** The default format of a permissions claim: OAuth's `scope`/`scp` are strings (RFC 8693 §4.2). */
export function defaultPermissionsFormat(claim: string): PermissionsFormat {
  return claim === 'scope' || claim === 'scp' ? 'space-delimited' : 'array'
}

export type KeySource =
  /**
   * An inline JSON Web Key Set; each key bound to its `alg`, or without one under
   * `algorithms`. A key that fits no allowed algorithm refuses the issuer.
   */
  | { readonly kind: 'jwks'; readonly jwks: { readonly keys: readonly Record<string, unknown>[] } }
  /**
   * A remote JWKS, fetched and cached (max age, cooldown on unknown `kid`, stale on error).
   * A published key that fits no allowed algorithm is skipped and reported (jwks.ts).
   */
  | { readonly kind: 'jwks_url'; readonly url: string }
  /**
   * A remote JWKS found through OpenID Connect discovery from the issuer URL alone: its
   * `/.well-known/openid-configuration` must name exactly this issuer, and its `jwks_uri` is
   * fetched and cached like `jwks_url`. The issuer must be https (http on loopback only).
   */
  | {
      readonly kind: 'oidc_discovery'
      /**
       * Origins (`https://keys.example`) besides the issuer's own that the document's
       * `jwks_uri` may point to. Default none: a `jwks_uri` elsewhere is refused.
       */
      readonly jwksOrigins?: readonly string[] | undefined
    }
  /** One SPKI PEM public key, bound to exactly one algorithm. */
  | {
      readonly kind: 'pem'
      readonly pem: string
      readonly algorithm: string
      readonly kid?: string
    }
  /** A shared secret (base64url), for HS256/384/512 only, bound to exactly one algorithm. */
  | { readonly kind: 'secret'; readonly secret: string; readonly algorithm: string }

export const DEFAULT_ALGORITHMS = ['RS256', 'PS256', 'ES256', 'EdDSA'] as const
export const DEFAULT_TENANT_CLAIM = 'tenant_id'
export const DEFAULT_PERMISSIONS_CLAIM = 'permissions'
