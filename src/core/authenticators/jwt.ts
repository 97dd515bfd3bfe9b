/**
 * JWT access tokens (DESIGN rules 5 and 6): every token not claimed by another kind is
 * verified against the trusted issuers; then `X-Tenant-Id` is required and must equal the
 * tenant claim, and the tenant must exist and be enabled.
 */
import { thenMaybe } from '../../lib/maybe-async.ts'
import { jwtFingerprint } from '../fingerprint.ts'
import type { AuthLookups, JwtOutcome, JwtVerifier, VerifiedJwt } from '../ports.ts'
import type { AuthResult, Principal } from '../principal.ts'
import {
  afterTenantCheck,
  checkRequiredTenantHeader,
  checkTenantActive,
  fail,
} from '../tenant-rules.ts'
import type { Authenticator } from './authenticator.ts'

export function createJwtAuthenticator(deps: {
  readonly lookups: AuthLookups
  readonly jwt: JwtVerifier
}): Authenticator {
  const { lookups, jwt: verifier } = deps
  // Per authenticator, so that two instances (tests, library users) share no state.
  const principals = new WeakMap<VerifiedJwt, Principal>()
  return {
    kind: 'jwt',
    // The fallback kind: a token no other kind claims is verified as a JWT (and fails as one).
    claims: () => true,
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
      return thenMaybe(outcome, (verified) => afterVerify(verified, context.tenantIds))
    },
  }

  function afterVerify(
    outcome: JwtOutcome,
    tenantIds: readonly string[],
  ): AuthResult | Promise<AuthResult> {
    if (!outcome.ok) return fail(outcome.failure)
    const verified = outcome.jwt
    const headerFailure = checkRequiredTenantHeader(tenantIds, verified.tenantId)
    if (headerFailure !== undefined) return fail(headerFailure)
    return afterTenantCheck(checkTenantActive(lookups, verified.tenantId), () => ({
      ok: true,
      principal: jwtPrincipal(verified),
    }))
  }

  /**
   * The principal of a verified JWT, built once per `VerifiedJwt` (a cached token is the same
   * object on every request); the tenant check that can change is made per request, above.
   */
  function jwtPrincipal(verified: VerifiedJwt): Principal {
    let principal = principals.get(verified)
    if (principal === undefined) {
      principal = Object.freeze({
        tokenType: 'jwt',
        tenantId: verified.tenantId,
        subject: verified.subject,
        permissions: verified.permissions,
        tokenId: verified.tokenId,
        expiresAt: verified.expiresAt,
        issuer: verified.issuer,
        fingerprint: jwtFingerprint(verified.issuer, verified.keyId, verified.subject),
      } satisfies Principal)
      principals.set(verified, principal)
    }
    return principal
  }
}
