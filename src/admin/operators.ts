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

export interface OperatorVerifier {
  verify(credential: string): Promise<OperatorCheck>
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
  return {
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
      const roles = outcome.jwt.permissions
      const role: AdminRole | undefined = roles.includes('operator')
        ? 'operator'
        : roles.includes('read-only')
          ? 'read-only'
          : undefined
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
    },
  }
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
