/**
 * The claim rules, applied to a payload whose signature has been checked:
 * - `checkRegisteredClaims`: `iss`, `aud`, `exp`, `nbf` and the types of the time claims,
 *   exactly as jose's `jwtVerify` checks them (same order, same comparisons, so the same
 *   failure for the same token: test/core/jwt-differential.test.ts);
 * - `checkClaims`: the rules tokengate adds: future `iat`, maximum lifetime, `sub`, tenant
 *   and permissions. Turns the payload into a `VerifiedJwt`.
 */
import { readConfirmation, thumbprintDigest } from './certificate-binding.ts'
import type { AuthFailure } from './failure.ts'
import type { PermissionsFormat } from './issuer.ts'
import type { VerifiedJwt } from './ports.ts'

/** How one issuer's tokens name the tenant and the permissions. */
export interface ClaimRules {
  readonly tenant: { readonly claim: string } | { readonly fixed: string }
  readonly permissionsClaim: string
  readonly permissionsFormat: PermissionsFormat
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

/** Claims whose names may appear in a failure detail; others are "a claim". */
const REGISTERED_CLAIMS = new Set(['iss', 'aud', 'exp', 'nbf', 'iat', 'sub'])

function claimFailure(claim: string): AuthFailure {
  const name = REGISTERED_CLAIMS.has(claim) ? `the "${claim}" claim` : 'a claim'
  return { code: 'invalid_token', reason: 'claims', detail: `${name} is missing or invalid` }
}

/**
 * jose's `validateClaimsSet` for the options tokengate uses (`issuer`, `audience`,
 * `requiredClaims: ['exp']`, `clockTolerance`, `currentDate`), in jose's order: presence of
 * `iss`, `aud`, `exp`; `iss` equal; `aud` (a string, or an array containing an accepted
 * audience); `iat` and `nbf` numbers when present; `nbf` not after now + tolerance; `exp` a
 * number after now - tolerance. Undefined when all hold.
 */
export function checkRegisteredClaims(
  payload: Readonly<Record<string, unknown>>,
  issuer: string,
  audiences: readonly string[],
  nowSec: number,
  toleranceSec: number,
): AuthFailure | undefined {
  for (const claim of ['iss', 'aud', 'exp']) {
    if (!Object.hasOwn(payload, claim)) return claimFailure(claim)
  }
  if (payload.iss !== issuer) return claimFailure('iss')
  const aud = payload.aud
  const audienceOk =
    typeof aud === 'string'
      ? audiences.includes(aud)
      : Array.isArray(aud) && audiences.some((accepted) => aud.includes(accepted))
  if (!audienceOk) return claimFailure('aud')
  if (payload.iat !== undefined && typeof payload.iat !== 'number') return claimFailure('iat')
  const nbf = payload.nbf
  if (nbf !== undefined) {
    if (typeof nbf !== 'number') return claimFailure('nbf')
    if (nbf > nowSec + toleranceSec) {
      return {
        code: 'invalid_token',
        reason: 'not_yet_valid',
        detail: 'the token is not valid yet',
      }
    }
  }
  const exp = payload.exp
  if (typeof exp !== 'number') return claimFailure('exp')
  if (exp <= nowSec - toleranceSec)
    return { code: 'token_expired', detail: 'the token has expired' }
  return undefined
}

/**
 * Applies the remaining claim rules to a payload whose signature and registered claims have
 * been verified by `checkRegisteredClaims` (`exp` is present and a number, `iat`/`nbf` are
 * numbers when present).
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
  const permissions = readPermissions(payload[rules.permissionsClaim], rules.permissionsFormat)
  if (permissions === undefined) {
    return invalid(
      'claims',
      rules.permissionsFormat === 'array'
        ? 'the permissions claim must be an array of strings'
        : 'the permissions claim must be a space-delimited string',
    )
  }
  const boundThumbprint = readConfirmation(payload.cnf)
  if (boundThumbprint === undefined) {
    return invalid('claims', 'the "cnf" claim must be an object with a SHA-256 "x5t#S256"')
  }
  const jwt: VerifiedJwt = Object.freeze({
    issuer: context.issuer,
    subject,
    tenantId,
    permissions,
    tokenId: jti,
    expiresAt: exp * 1000,
    keyId: context.keyId,
    issuedAt: iat === undefined ? undefined : iat * 1000,
    // Read only for revocation rules by session; any other type is simply not a session id.
    sessionId: typeof payload.sid === 'string' ? payload.sid : undefined,
    // RFC 8705: decoded once here, so a cached token's check is one 32-byte compare.
    ...(boundThumbprint === null ? {} : { certificateDigest: thumbprintDigest(boundThumbprint) }),
  })
  return { ok: true, jwt }
}

/**
 * Reads permissions in the issuer's one format: absent → none; `array`: non-empty strings
 * as is; `space-delimited`: one string (OAuth `scope`) split on spaces. Anything else →
 * undefined: the token is refused rather than read as "no permissions" or in the other
 * format. Why strict: reading a string as a one-item list on an array issuer turns claims an
 * identity provider never meant as permissions (a display string, a free-text field an
 * end user can set) into grants.
 */
function readPermissions(value: unknown, format: PermissionsFormat): readonly string[] | undefined {
  if (value === undefined) return Object.freeze([])
  if (format === 'space-delimited') {
    return typeof value === 'string'
      ? Object.freeze(value.split(' ').filter((p) => p !== ''))
      : undefined
  }
  if (!Array.isArray(value)) return undefined
  for (const item of value) {
    if (typeof item !== 'string' || item.length === 0) return undefined
  }
  return Object.freeze([...(value as string[])])
}
