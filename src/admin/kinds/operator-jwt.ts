/**
 * An operator JWT from the configured operator issuer (`admin.oidc`): every bearer token no
 * other admin kind claimed (refused as one when SSO is off). Verified with the issuer's rules
 * and the JWT revocation rules, so a revoked operator `sub`, `sid` or `jti` is refused here
 * as on the API.
 */
import { fingerprintJwtToken } from '../../core/fingerprint.ts'
import { type AdminCredentialKind, operatorLimiterKey, operatorPrincipal } from './admin-kind.ts'

export const operatorJwtKind: AdminCredentialKind = {
  name: 'operator-jwt',
  create: (deps) => ({
    kind: 'operator-jwt',
    claim: (_request, bearer) => bearer,
    authenticate: async (token) =>
      operatorPrincipal('operator-jwt', await deps.operators.verifyJwt(token), deps),
  }),
  fingerprint: fingerprintJwtToken,
  limiterKey: operatorLimiterKey,
  storedKeyId: () => undefined,
}
