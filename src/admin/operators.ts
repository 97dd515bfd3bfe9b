import { verifyAdminToken } from '../auth/admin-tokens.ts'
import type { Config } from '../config/schema.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { IssuerConfig } from '../core/issuer.ts'
import { createJwtVerifier } from '../core/jwt.ts'
import { type JwtRevocationSet, revokedByRule } from '../core/jwt-revocations.ts'
import { isPatToken } from '../core/pat.ts'
import type { Clock, JwtVerifier, VerifiedJwt } from '../core/ports.ts'
import type { AdminRole, AdminStore } from '../stores/admin-store.ts'

/** What the JWT revocation rules read of an operator's JWT (or ID token), kept with its session. */
export type OperatorJwt = Pick<
  VerifiedJwt,
  'issuer' | 'subject' | 'tenantId' | 'tokenId' | 'expiresAt' | 'issuedAt' | 'sessionId'
>

/** A signed-in operator: who (the audit actor), what they may do, until when. */
export interface Operator {
  /** `admin:<token name>` or `oidc:<sub>`: the actor on audit events. */
  readonly actor: string
  readonly role: AdminRole
  readonly expiresAt: number
  /** SHA-256 of the admin token (sessions re-check it, so a revocation ends them). */
  readonly adminTokenHash: string | undefined
  /** The operator JWT or ID token signed in with: sessions re-check it against the JWT revocation rules. */
  readonly jwt?: OperatorJwt | undefined
}

export type OperatorCheck =
  | { readonly ok: true; readonly operator: Operator }
  /** `invalid`: 401; `no_role`: a valid operator JWT without an admin role (403). */
  | {
      readonly ok: false
      readonly reason: 'invalid' | 'no_role'
      /** The verifier's own failure, when it has one (a revoked JWT's rule, for the audit). */
      readonly failure?: AuthFailure | undefined
    }

/** An ID token from sign-in by redirect: the operator, and the `nonce` it carries. */
export type IdTokenCheck =
  | { readonly ok: true; readonly operator: Operator; readonly nonce: unknown }
  /** `detail`: which rule refused it (client-safe, from the core's verifier). */
  | { readonly ok: false; readonly reason: 'invalid' | 'no_role'; readonly detail: string }

export interface OperatorVerifier {
  /** An admin token (`tga_…`): found by its SHA-256, not revoked, not expired. */
  verifyAdminToken(token: string): Promise<OperatorCheck>
  /** An operator JWT from `admin.oidc`'s issuer, checked against the JWT revocation rules too. */
  verifyJwt(token: string): Promise<OperatorCheck>
  /**
   * An ID token from the operator issuer's token endpoint (sign-in by redirect): signature,
   * `alg`, `iss`, `aud` = `admin.oidc.clientId` (with `azp` when `aud` names others), `exp`,
   * lifetime, then the role claim. The nonce is returned for the caller to compare.
   */
  verifyIdToken(idToken: string, sessionMs: number): Promise<IdTokenCheck>
  /**
   * Why a session's operator is no longer valid: its admin token revoked or expired, or the
   * JWT it signed in with refused by a JWT revocation rule (within the change log's second).
   */
  refusal(operator: Operator): Promise<AuthFailure | undefined>
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
  /** The process's JWT revocation rules (auth/jwt-revocation-feed.ts); omitted: none. */
  revocations?: Pick<JwtRevocationSet, 'size' | 'match'>,
): OperatorVerifier {
  const oidc = config.admin.oidc
  const jwt: (JwtVerifier & { close?: () => void }) | undefined = oidc
    ? createJwtVerifier([oidcIssuer(oidc)], {
        clock,
        clockToleranceSec: config.auth.clockToleranceSec,
        maxLifetimeSec: config.auth.maxJwtLifetimeSec,
        jwks: { timeoutMs: config.auth.jwksTimeoutMs },
        revocations,
      })
    : undefined
  const idTokens: (JwtVerifier & { close?: () => void }) | undefined = oidc?.clientId
    ? createJwtVerifier([{ ...oidcIssuer(oidc), audiences: [oidc.clientId] }], {
        clock,
        clockToleranceSec: config.auth.clockToleranceSec,
        maxLifetimeSec: config.auth.maxJwtLifetimeSec,
        jwks: { timeoutMs: config.auth.jwksTimeoutMs },
        revocations,
      })
    : undefined
  const verifier: OperatorVerifier = {
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
          jwt: operatorJwt(outcome.jwt),
        },
      }
    },
    async verifyAdminToken(token) {
      const checked = await verifyAdminToken(store, token, clock.now())
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
    },
    async verifyJwt(token) {
      if (!jwt || isPatToken(token)) return { ok: false, reason: 'invalid' }
      const outcome = await jwt.verify(token)
      if (!outcome.ok) return { ok: false, reason: 'invalid', failure: outcome.failure }
      const role = roleOf(outcome.jwt.permissions)
      if (!role) return { ok: false, reason: 'no_role' }
      return {
        ok: true,
        operator: {
          actor: `oidc:${outcome.jwt.subject}`,
          role,
          expiresAt: outcome.jwt.expiresAt,
          adminTokenHash: undefined,
          jwt: operatorJwt(outcome.jwt),
        },
      }
    },
    async refusal(operator) {
      const now = clock.now()
      if (operator.adminTokenHash !== undefined) {
        const record = await store.findAdminTokenByHash(operator.adminTokenHash)
        return record !== undefined && record.revokedAt === null && now < record.expiresAt
          ? undefined
          : SESSION_ENDED
      }
      if (now >= operator.expiresAt) return SESSION_ENDED
      // The claims were verified at sign-in; the rules may have changed since.
      const rule =
        operator.jwt && revocations && revocations.size > 0
          ? revocations.match({ ...operator.jwt, permissions: [], keyId: undefined }, clock)
          : undefined
      return rule === undefined ? undefined : revokedByRule(rule)
    },
    close() {
      jwt?.close?.()
      idTokens?.close?.()
    },
  }
  return verifier
}

/** The failure of a session whose admin token was revoked or expired, or that expired itself. */
const SESSION_ENDED: AuthFailure = {
  code: 'invalid_token',
  reason: 'unknown_token',
  detail: 'The console session has ended.',
}

/** What a session keeps of the JWT it signed in with (never the token). */
function operatorJwt(jwt: VerifiedJwt): OperatorJwt {
  return {
    issuer: jwt.issuer,
    subject: jwt.subject,
    tenantId: jwt.tenantId,
    tokenId: jwt.tokenId,
    expiresAt: jwt.expiresAt,
    issuedAt: jwt.issuedAt,
    sessionId: jwt.sessionId,
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
