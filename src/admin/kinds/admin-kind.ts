/**
 * The admin listener's credential kinds: the same `CredentialKind` shape as the API's (claim
 * or pass, authenticate, describe), built over the admin gate's own dependencies (the admin
 * store, operator SSO, console sessions), which core/ may not import. They are described to
 * the limiter, recorder and challenges (`describeCredentialKind`) but never registered on
 * the API, so an operator credential is never an API credential.
 */
import type { Authenticator } from '../../core/credential-kind.ts'
import type { KindDescription } from '../../core/credential-kinds.ts'
import type { Clock } from '../../core/ports.ts'
import type { AuthResult, Principal } from '../../core/principal.ts'
import type { Operator, OperatorCheck, OperatorVerifier } from '../operators.ts'
import type { Session, Sessions } from '../sessions.ts'

/** The tenant id of every admin principal: no API tenant is ever named so (reserved). */
export const ADMIN_TENANT = 'tokengate-admin'

export interface AdminKindDeps {
  readonly operators: OperatorVerifier
  readonly sessions: Sessions
  readonly clock: Clock
  /** Keeps who an authenticated principal is, for the admin gate's `operatorOf`. */
  remember(principal: Principal, operator: Operator, session?: Session): void
}

export interface AdminCredentialKind extends KindDescription {
  create(deps: AdminKindDeps): Authenticator
}

/** An operator as a principal: the actor names it (`admin:<name>`, `oidc:<sub>`). */
export function operatorPrincipal(
  kind: string,
  checked: OperatorCheck,
  deps: AdminKindDeps,
  session?: Session,
): AuthResult {
  if (!checked.ok) {
    if (checked.reason === 'no_role') {
      return { ok: false, failure: { code: 'insufficient_permission', required: ['read-only'] } }
    }
    return {
      ok: false,
      failure: checked.failure ?? {
        code: 'invalid_token',
        reason: 'unknown_token',
        detail: 'The operator credential is not valid.',
      },
    }
  }
  const { operator } = checked
  const principal: Principal = Object.freeze({
    tokenType: kind,
    tenantId: ADMIN_TENANT,
    subject: operator.actor,
    permissions: [operator.role],
    tokenId: undefined,
    expiresAt: operator.expiresAt,
    // The actor names the credential and shows none of it.
    fingerprint: operator.actor,
  })
  deps.remember(principal, operator, session)
  return { ok: true, principal }
}

/** Operators are counted by who they are (per-operator limits are off; the key is for a later one). */
export const operatorLimiterKey = (principal: Principal): string =>
  `${principal.tokenType}:${principal.fingerprint}`
