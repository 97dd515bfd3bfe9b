/**
 * The claim rules tokengate adds on top of jose's (which has already checked the signature,
 * `iss`, `aud`, `exp`, `nbf` and the claim types): future `iat`, maximum lifetime, `sub`,
 * tenant and permissions. Turns a verified payload into a `VerifiedJwt`.
 */
import type { AuthFailure } from './failure.ts'
import type { VerifiedJwt } from './ports.ts'

/** How one issuer's tokens name the tenant and the permissions. */
export interface ClaimRules {
  readonly tenant: { readonly claim: string } | { readonly fixed: string }
  readonly permissionsClaim: string
}

export interface ClaimContext {
  readonly issuer: string
  readonly keyId: string | undefined
  readonly nowSec: number
  readonly toleranceSec: number
  readonly maxLifetimeSec: number
}

export type ClaimsOutcome =
  | { readonly ok: true; readonly jwt: VerifiedJwt }
  | { readonly ok: false; readonly failure: AuthFailure }

const invalid = (
  reason: 'claims' | 'not_yet_valid' | 'lifetime_exceeded',
  detail: string,
): ClaimsOutcome => ({ ok: false, failure: { code: 'invalid_token', reason, detail } })

/**
 * Applies the remaining claim rules to a payload whose signature and registered time claims
 * jose has verified (`exp` is present and a number, `iat`/`nbf` are numbers when present).
 */
export function checkClaims(
  payload: Readonly<Record<string, unknown>>,
  rules: ClaimRules,
  context: ClaimContext,
): ClaimsOutcome {
  const exp = payload.exp as number
  const iat = payload.iat as number | undefined
  // A token "issued" in the future is either forged or from a broken clock: the lifetime
  // computed from it would be meaningless, so it is refused like an early `nbf`.
  if (iat !== undefined && iat > context.nowSec + context.toleranceSec) {
    return invalid('not_yet_valid', 'the token was issued in the future')
  }
  // A maximum lifetime bounds the damage of a leaked token even when the issuer mints
  // long-lived ones. Without `iat`, the remaining lifetime is what we can bound.
  const lifetimeSec = exp - (iat ?? context.nowSec)
  if (lifetimeSec > context.maxLifetimeSec) {
    return invalid('lifetime_exceeded', 'the token lifetime exceeds the maximum allowed')
  }
  const subject = payload.sub
  if (typeof subject !== 'string' || subject.length === 0) {
    return invalid('claims', 'the "sub" claim must be a non-empty string')
  }
  const jti = payload.jti
  if (jti !== undefined && typeof jti !== 'string') {
    return invalid('claims', 'the "jti" claim must be a string')
  }
  let tenantId: string
  if ('fixed' in rules.tenant) {
    tenantId = rules.tenant.fixed
  } else {
    const value = payload[rules.tenant.claim]
    if (typeof value !== 'string' || value.length === 0) {
      return invalid('claims', 'the tenant claim must be a non-empty string')
    }
    tenantId = value
  }
  const permissions = readPermissions(payload[rules.permissionsClaim])
  if (permissions === undefined) {
    return invalid('claims', 'the permissions claim must be an array of strings or a string')
  }
  const jwt: VerifiedJwt = Object.freeze({
    issuer: context.issuer,
    subject,
    tenantId,
    permissions,
    tokenId: jti,
    expiresAt: exp * 1000,
    keyId: context.keyId,
  })
  return { ok: true, jwt }
}

/**
 * Reads permissions: absent → none; an array of non-empty strings as is; a string (OAuth
 * `scope`) split on spaces. Anything else → undefined (the token is refused rather than
 * read as "no permissions", so an issuer misconfiguration is loud).
 */
function readPermissions(value: unknown): readonly string[] | undefined {
  if (value === undefined) return Object.freeze([])
  if (typeof value === 'string') return Object.freeze(value.split(' ').filter((p) => p !== ''))
  if (!Array.isArray(value)) return undefined
  for (const item of value) {
    if (typeof item !== 'string' || item.length === 0) return undefined
  }
  return Object.freeze([...(value as string[])])
}
