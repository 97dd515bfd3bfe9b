/**
 * The admin token (`tga_…`, issued by `tokengate admin token issue`): a bearer token on the
 * admin listener, looked up by its SHA-256 (auth/admin-tokens.ts). A refused one is named by
 * an `hmac:` fingerprint: an unknown `tga_` string may be a real token with a typo.
 */
import { hmacFingerprint } from '../../core/fingerprint.ts'
import { type AdminCredentialKind, operatorLimiterKey, operatorPrincipal } from './admin-kind.ts'

/** Whether a credential is an admin token's to decide (the one test of its prefix). */
export function claimsAdminToken(credential: string): boolean {
  return credential.startsWith('tga_')
}

export const adminTokenKind: AdminCredentialKind = {
  name: 'admin-token',
  create: (deps) => ({
    kind: 'admin-token',
    claim: (_request, bearer) =>
      bearer !== undefined && claimsAdminToken(bearer) ? bearer : undefined,
    authenticate: async (token) =>
      operatorPrincipal('admin-token', await deps.operators.verifyAdminToken(token), deps),
  }),
  fingerprint: hmacFingerprint,
  limiterKey: operatorLimiterKey,
  // No API key: nothing to count uses against.
  storedKeyId: () => undefined,
}
