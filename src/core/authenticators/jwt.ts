/**
 * JWT access tokens (DESIGN rules 5 and 6): every token not claimed by another kind is
 * verified against the trusted issuers; then `X-Tenant-Id` is required and must equal the
 * tenant claim, and the tenant must exist and be enabled.
 */

import { hash } from 'node:crypto'
import { isPromiseLike } from '../../lib/maybe-async.ts'
import { checkCertificateBinding } from '../certificate-binding.ts'
import type { Authenticator, CredentialKind, CredentialRequest } from '../credential-kind.ts'
import type { AuthFailure } from '../failure.ts'
import { fingerprintJwtToken, jwtFingerprint } from '../fingerprint.ts'
import type { AuthLookups, JwtOutcome, JwtVerifier, VerifiedJwt } from '../ports.ts'
import type { AuthResult, Principal } from '../principal.ts'
import { checkRequiredTenantHeader, checkTenantActive, fail } from '../tenant-rules.ts'

/** The JWT kind: every bearer token no other kind claimed, verified against the issuers. */
export const jwtKind: CredentialKind = {
  name: 'jwt',
  fallback: true,
  create: createJwtAuthenticator,
  fingerprint: fingerprintJwtToken,
  limiterKey: jwtLimiterKey,
  storedKeyId: () => undefined,
}

export function createJwtAuthenticator(deps: {
  readonly lookups: AuthLookups
  readonly jwt: JwtVerifier
}): Authenticator {
  const { lookups, jwt: verifier } = deps
  // Per authenticator, so that two instances (tests, library users) share no state.
  const allowedResults = new WeakMap<VerifiedJwt, AuthResult>()
  return {
    kind: 'jwt',
    // The fallback kind: a token no other kind claims is verified as a JWT (and fails as one).
    claim: (_request, bearer) => bearer,
    authenticate(token, context) {
      let outcome: JwtOutcome | Promise<JwtOutcome>
      try {
        outcome = verifier.verifyMaybeSync
          ? verifier.verifyMaybeSync(token, context.sha256Hex)
          : verifier.verify(token)
      } catch (error) {
        // A verifier bug rejects the request; it never passes it.
        return Promise.reject(error)
      }
      // A branch, not `thenMaybe`: its callback call site is shared by every caller, so V8
      // would call a closure made per request through it, cached tokens included.
      return isPromiseLike(outcome)
        ? afterVerifyLater(outcome, context.tenantIds, context.request)
        : afterVerify(outcome, context.tenantIds, context.request)
    },
  }

  // The continuations after a wait, out of the functions that may wait: a closure there makes
  // V8 allocate a context for what it captures on every call, cached tokens included.
  function afterVerifyLater(
    pending: PromiseLike<JwtOutcome>,
    tenantIds: readonly string[],
    request: CredentialRequest,
  ): Promise<AuthResult> {
    return Promise.resolve(pending).then((settled) => afterVerify(settled, tenantIds, request))
  }

  function afterVerify(
    outcome: JwtOutcome,
    tenantIds: readonly string[],
    request: CredentialRequest,
  ): AuthResult | Promise<AuthResult> {
    if (!outcome.ok) return fail(outcome.failure)
    const verified = outcome.jwt
    // After the verified-token cache too: a cached token is bound to its certificate as well.
    if (verified.certificateDigest !== undefined) {
      const unbound = checkCertificateBinding(verified.certificateDigest, request.peerCertificate)
      if (unbound !== undefined) return fail(unbound)
    }
    const headerFailure = checkRequiredTenantHeader(tenantIds, verified.tenantId)
    if (headerFailure !== undefined) return fail(headerFailure)
    const tenantChecked = checkTenantActive(lookups, verified.tenantId)
    return isPromiseLike(tenantChecked)
      ? afterTenantLater(tenantChecked, verified)
      : afterTenant(tenantChecked, verified)
  }

  function afterTenantLater(
    pending: Promise<AuthFailure | undefined>,
    verified: VerifiedJwt,
  ): Promise<AuthResult> {
    return pending.then((tenantFailure) => afterTenant(tenantFailure, verified))
  }

  function afterTenant(tenantFailure: AuthFailure | undefined, verified: VerifiedJwt): AuthResult {
    return tenantFailure === undefined ? jwtAllowed(verified) : fail(tenantFailure)
  }

  /**
   * The allowed result and principal of a verified JWT, built once per `VerifiedJwt` (a cached
   * token is the same object on every request; frozen, so sharing them is safe); the tenant
   * check that can change is made per request, above.
   */
  function jwtAllowed(verified: VerifiedJwt): AuthResult {
    let allowed = allowedResults.get(verified)
    if (allowed === undefined) {
      const principal: Principal = Object.freeze({
        tokenType: 'jwt',
        tenantId: verified.tenantId,
        subject: verified.subject,
        permissions: verified.permissions,
        tokenId: verified.tokenId,
        expiresAt: verified.expiresAt,
        issuer: verified.issuer,
        fingerprint: jwtFingerprint(verified.issuer, verified.keyId, verified.subject),
      } satisfies Principal)
      allowed = Object.freeze({ ok: true, principal })
      allowedResults.set(verified, allowed)
    }
    return allowed
  }
}

/**
 * The per-token rate-limit key of a JWT caller: a digest of issuer, tenant and subject, so a
 * client that refreshes its short-lived JWT keeps one allowance (its `jti` changes every
 * time) and Redis holds no subject identifiers in clear text.
 */
function jwtLimiterKey(principal: Principal): string {
  // A repeated JWT has the same principal object each time (jwtPrincipal above).
  const known = principalKeys.get(principal)
  if (known !== undefined) return known
  const identity = `${principal.issuer ?? ''}\n${principal.tenantId}\n${principal.subject}`
  let key = identityKeys.get(identity)
  if (key === undefined) {
    key = `jwt:${hash('sha256', identity, 'base64url').slice(0, 27)}`
    // Bounded like the verified-token cache; a full map starts over (one hash per caller).
    if (identityKeys.size >= MAX_IDENTITY_KEYS) identityKeys.clear()
    identityKeys.set(identity, key)
  }
  principalKeys.set(principal, key)
  return key
}

const principalKeys = new WeakMap<Principal, string>()
/**
 * Keys of recent JWT callers by identity: a SHA-256 per request was a visible share of a
 * cached JWT request's profile, a Map lookup of the same string is a fraction of it. Only
 * digests and the (non-secret) identity are held, never a token.
 */
const identityKeys = new Map<string, string>()
const MAX_IDENTITY_KEYS = 10_000
