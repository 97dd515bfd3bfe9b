/**
 * The operator's JWT revocation rules (core/jwt-revocations.ts) as operations shared by the
 * CLI, the admin API and `apply`: each audited, each refusal an `OperationRefused`.
 */
import { randomBytes } from 'node:crypto'
import {
  JWT_REVOCATION_KINDS,
  type JwtRevocationKind,
  type JwtRevocationRule,
  jwtRevocationExpiry,
} from '../core/jwt-revocations.ts'
import type { JwtRevocationStore } from '../stores/store.ts'
import { audit, type OperationDeps, OperationRefused } from './operations.ts'

export interface JwtRevocationRequest {
  readonly issuer: string
  readonly kind: JwtRevocationKind
  readonly value: string
  /**
   * `sub` and `tenant` only: tokens issued (`iat`) before this are refused (epoch ms).
   * Default now; never later than now (a rule refuses tokens that exist, not future ones).
   */
  readonly issuedBefore?: number | undefined
  readonly reason?: string | undefined
  /** The CAEP event that asked for the rule (ssf/receiver.ts), named in its audit event. */
  readonly cause?: { readonly set: string; readonly event: string } | undefined
}

/** The lifetime bounds a rule's expiry follows: the server's `auth.maxJwtLifetimeSec` and skew. */
export interface JwtLifetime {
  readonly maxLifetimeSec: number
  readonly clockToleranceSec: number
  /**
   * The operator sign-in issuer (`admin.oidc.issuer`): trusted on the admin listener only,
   * not in the store, and its tokens are revoked by the same rules.
   */
  readonly operatorIssuer?: string | undefined
}

type Deps = OperationDeps & { readonly store: OperationDeps['store'] & JwtRevocationStore }

const MAX_VALUE = 1024
const MAX_REASON = 500

/**
 * Makes (or widens) a rule and audits `jwt.revoked` naming it. The issuer must be trusted
 * (in the store, or the operator sign-in issuer);
 * the rule expires once every token it could match has (`jwtRevocationExpiry`).
 */
export async function revokeJwts(
  deps: Deps,
  request: JwtRevocationRequest,
  lifetime: JwtLifetime,
): Promise<JwtRevocationRule> {
  const { issuer, kind, value } = request
  if (!JWT_REVOCATION_KINDS.includes(kind)) {
    throw new OperationRefused(
      'invalid_input',
      'kind',
      `kind: expected ${JWT_REVOCATION_KINDS.join(', ')}`,
    )
  }
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_VALUE) {
    throw new OperationRefused(
      'invalid_input',
      kind,
      `${kind}: expected 1 to ${MAX_VALUE} characters`,
    )
  }
  const reason = request.reason ?? null
  if (reason !== null && (typeof reason !== 'string' || reason.length > MAX_REASON)) {
    throw new OperationRefused(
      'invalid_input',
      'reason',
      `reason: at most ${MAX_REASON} characters`,
    )
  }
  const now = deps.clock.now()
  let issuedBefore: number | null = null
  if (kind === 'sub' || kind === 'tenant') {
    issuedBefore = request.issuedBefore ?? now
    if (!Number.isFinite(issuedBefore) || issuedBefore > now) {
      throw new OperationRefused(
        'invalid_input',
        'before',
        'before: a time no later than now (a rule refuses tokens already issued)',
      )
    }
  } else if (request.issuedBefore !== undefined) {
    throw new OperationRefused(
      'invalid_input',
      'before',
      `before: only for sub and tenant rules (a ${kind} rule refuses every token carrying it)`,
    )
  }
  const expiresAt = jwtRevocationExpiry(
    now,
    issuedBefore,
    lifetime.maxLifetimeSec,
    lifetime.clockToleranceSec,
  )
  if (expiresAt <= now) {
    throw new OperationRefused(
      'invalid_input',
      'before',
      'before: every token issued before it has expired already (auth.maxJwtLifetimeSec); nothing to revoke',
    )
  }
  if (
    issuer !== lifetime.operatorIssuer &&
    !(await deps.store.listIssuers()).some((i) => i.issuer === issuer)
  ) {
    throw new OperationRefused('issuer_unknown', issuer, `no issuer ${issuer}`)
  }
  const stored = await deps.store.putJwtRevocation({
    id: `jrv_${randomBytes(12).toString('base64url')}`,
    issuer,
    kind,
    value,
    issuedBefore,
    reason,
    createdAt: now,
    createdBy: deps.actor.actor,
    expiresAt,
  })
  await audit(deps, {
    type: 'jwt.revoked',
    tenantId: kind === 'tenant' ? value : null,
    details: {
      rule: stored.id,
      issuer,
      kind,
      value,
      issuedBefore: iso(stored.issuedBefore),
      expiresAt: iso(stored.expiresAt),
      reason: stored.reason,
      ...(request.cause === undefined ? {} : request.cause),
    },
  })
  return stored
}

/** Removes a rule before it expires and audits `jwt.revocation_removed`. */
export async function removeJwtRevocation(deps: Deps, id: string): Promise<JwtRevocationRule> {
  const existing = await deps.store.getJwtRevocation(id)
  if (existing === undefined || !(await deps.store.removeJwtRevocation(id))) {
    throw new OperationRefused('revocation_unknown', id, `no JWT revocation rule ${id}`)
  }
  await audit(deps, {
    type: 'jwt.revocation_removed',
    tenantId: existing.kind === 'tenant' ? existing.value : null,
    details: { rule: id, issuer: existing.issuer, kind: existing.kind, value: existing.value },
  })
  return existing
}

/** The rules in force now, oldest first. */
export function listJwtRevocations(
  deps: Pick<Deps, 'store' | 'clock'>,
): Promise<readonly JwtRevocationRule[]> {
  return deps.store.listJwtRevocations(deps.clock.now())
}

/** A rule as the CLI's `--json` and the admin API show it (times in ISO 8601). */
export function jwtRevocationJson(rule: JwtRevocationRule) {
  return {
    id: rule.id,
    issuer: rule.issuer,
    kind: rule.kind,
    value: rule.value,
    issuedBefore: iso(rule.issuedBefore),
    reason: rule.reason,
    createdAt: iso(rule.createdAt),
    createdBy: rule.createdBy,
    expiresAt: iso(rule.expiresAt),
  }
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString()
}
