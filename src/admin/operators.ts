import { verifyAdminToken } from '../auth/admin-tokens.ts'
import type { Config } from '../config/schema.ts'
import type { IssuerConfig } from '../core/issuer.ts'
import { createJwtVerifier } from '../core/jwt.ts'
import { isPatToken } from '../core/pat.ts'
import type { Clock, JwtVerifier } from '../core/ports.ts'
import type { AdminRole, AdminStore } from '../stores/admin-store.ts'

/** A signed-in operator: who (the audit actor), what they may do, until when. */
export interface Operator {
  /** `admin:<token name>` or `oidc:<sub>`: the actor on audit events. */
  readonly actor: string
  readonly role: AdminRole
  readonly expiresAt: number
  /** SHA-256 of the admin token (sessions re-check it, so a revocation ends them). */
  readonly adminTokenHash: string | undefined
}

export type OperatorCheck =
  | { readonly ok: true; readonly operator: Operator }
  /** `invalid`: 401; `no_role`: a valid operator JWT without an admin role (403). */
  | { readonly ok: false; readonly reason: 'invalid' | 'no_role' }

/** An ID token from sign-in by redirect: the operator, and the `nonce` it carries. */
export type IdTokenCheck =
  | { readonly ok: true; readonly operator: Operator; readonly nonce: unknown }
  /** `detail`: which rule refused it (client-safe, from the core's verifier). */
  | { readonly ok: false; readonly reason: 'invalid' | 'no_role'; readonly detail: string }

export interface OperatorVerifier {
  verify(credential: string): Promise<OperatorCheck>
  /**
   * An ID token from the operator issuer's token endpoint (sign-in by redirect): signature,
   * `alg`, `iss`, `aud` = `admin.oidc.clientId` (with `azp` when `aud` names others), `exp`,
   * lifetime, then the role claim. The nonce is returned for the caller to compare.
   */
  verifyIdToken(idToken: string, sessionMs: number): Promise<IdTokenCheck>
  /** Whether the admin token behind a session is still valid (not revoked or expired). */
  stillValid(operator: Operator): Promise<boolean>
  close(): void
}

/**
 * Operator credentials, never API tokens: admin tokens (`tga_…`, from the CLI) and, when
 * `admin.oidc` is configured, operator JWTs from that issuer, verified by the core's JWT
 * verifier with the issuer's rules (algorithms, `aud`, `exp`, lifetime), whose role claim
 * names `operator` or `read-only`.
 */
export function createOperatorVerifier(
  config: Readonly<Config>,
  store: Pick<AdminStore, 'findAdminTokenByHash'>,
  clock: Clock,
): OperatorVerifier {
  const oidc = config.admin.oidc
  const jwt: (JwtVerifier & { close?: () => void }) | undefined = oidc
    ? createJwtVerifier([oidcIssuer(oidc)], {
        clock,
        clockToleranceSec: config.auth.clockToleranceSec,
        maxLifetimeSec: config.auth.maxJwtLifetimeSec,
        jwks: { timeoutMs: config.auth.jwksTimeoutMs },
      })
    : undefined
  const idTokens: (JwtVerifier & { close?: () => void }) | undefined = oidc?.clientId
    ? createJwtVerifier([{ ...oidcIssuer(oidc), audiences: [oidc.clientId] }], {
        clock,
        clockToleranceSec: config.auth.clockToleranceSec,
        maxLifetimeSec: config.auth.maxJwtLifetimeSec,
        jwks: { timeoutMs: config.auth.jwksTimeoutMs },
      })
    : undefined
  return {
    async verifyIdToken(idToken, sessionMs) {
      if (!idTokens || !oidc?.clientId) {
        return { ok: false, reason: 'invalid', detail: 'sign-in by redirect is not configured' }
      }
      const outcome = await idTokens.verify(idToken)
      if (!outcome.ok) {
        const failure = outcome.failure as { detail?: string }
        return {
          ok: false,
          reason: 'invalid',
          detail: failure.detail ?? 'the ID token is not valid',
        }
      }
      // The signature covers the payload: reading claims the verifier does not know is safe.
      const payload = JSON.parse(
        Buffer.from(idToken.split('.')[1] as string, 'base64url').toString('utf8'),
      ) as Record<string, unknown>
      // OpenID Connect Core §3.1.3.7: with other audiences beside us, `azp` must name us.
      if (Array.isArray(payload.aud) && payload.aud.length > 1 && payload.azp !== oidc.clientId) {
        return {
          ok: false,
          reason: 'invalid',
          detail: 'the "azp" claim does not name this console',
        }
      }
      const role = roleOf(outcome.jwt.permissions)
      if (!role) {
        return { ok: false, reason: 'no_role', detail: `no ${oidc.roleClaim} role` }
      }
      return {
        ok: true,
        nonce: payload.nonce,
        operator: {
          actor: `oidc:${outcome.jwt.subject}`,
          role,
          // The console session's own lifetime (admin.sessionTtlMs), not the ID token's: the
          // ID token proves the sign-in, it is not kept.
          expiresAt: clock.now() + sessionMs,
          adminTokenHash: undefined,
        },
      }
    },
    async verify(credential) {
      if (credential.startsWith('tga_')) {
        const checked = await verifyAdminToken(store, credential, clock.now())
        if (!checked.ok) return { ok: false, reason: 'invalid' }
        const { record } = checked
        return {
          ok: true,
          operator: {
            actor: `admin:${record.name}`,
            role: record.role,
            expiresAt: record.expiresAt,
            adminTokenHash: record.tokenHash,
          },
        }
      }
      if (!jwt || isPatToken(credential)) return { ok: false, reason: 'invalid' }
      const outcome = await jwt.verify(credential)
      if (!outcome.ok) return { ok: false, reason: 'invalid' }
      const role = roleOf(outcome.jwt.permissions)
      if (!role) return { ok: false, reason: 'no_role' }
      return {
        ok: true,
        operator: {
          actor: `oidc:${outcome.jwt.subject}`,
          role,
          expiresAt: outcome.jwt.expiresAt,
          adminTokenHash: undefined,
        },
      }
    },
    async stillValid(operator) {
      if (operator.adminTokenHash === undefined) return clock.now() < operator.expiresAt
      const record = await store.findAdminTokenByHash(operator.adminTokenHash)
      return record !== undefined && record.revokedAt === null && clock.now() < record.expiresAt
    },
    close() {
      jwt?.close?.()
      idTokens?.close?.()
    },
  }
}

/** The console role a role claim grants: `operator` over `read-only`, else none. */
function roleOf(roles: readonly string[]): AdminRole | undefined {
  return roles.includes('operator')
    ? 'operator'
    : roles.includes('read-only')
      ? 'read-only'
      : undefined
}

/** The operator SSO issuer as a trusted-issuer config; the role claim is read as permissions. */
function oidcIssuer(oidc: NonNullable<Config['admin']['oidc']>): IssuerConfig {
  return {
    issuer: oidc.issuer,
    audiences: [oidc.audience],
    keySource: oidc.jwksUrl ? { kind: 'jwks_url', url: oidc.jwksUrl } : { kind: 'oidc_discovery' },
    tenant: { fixed: 'tokengate-admin' },
    permissionsClaim: oidc.roleClaim,
  }
}
