/**
 * JWT revocation rules (issue #34): an operator (or, later, an identity provider's CAEP
 * event) refuses the tokens of one issuer by `jti`, by `sid`, by `sub` issued before a time,
 * or by tenant issued before a time. A rule lives only as long as a token it could match:
 * `expiresAt` = its time bound (or its creation) + the maximum JWT lifetime + clock skew, so
 * the set stays small and the store deletes it after that (retention).
 *
 * Each instance holds every live rule in memory (`JwtRevocationSet`), fed from the change
 * log like PAT revocations, and checks each verified JWT against it, cached ones included:
 * O(1) per request (one map lookup per rule kind), and one size check while there are none.
 */
import type { AuthFailure } from './failure.ts'
import type { VerifiedJwt } from './ports.ts'

export type JwtRevocationKind = 'jti' | 'sid' | 'sub' | 'tenant'
export const JWT_REVOCATION_KINDS: readonly JwtRevocationKind[] = ['jti', 'sid', 'sub', 'tenant']

/** One stored rule. */
export interface JwtRevocationRule {
  readonly id: string
  /** Exact `iss` of the tokens it refuses. */
  readonly issuer: string
  readonly kind: JwtRevocationKind
  /** The `jti`, `sid`, `sub` or tenant id it refuses. */
  readonly value: string
  /**
   * `sub` and `tenant` rules: tokens whose `iat` is before this (epoch ms) are refused, and
   * tokens without `iat` (their age is unknown: fail closed). Null for `jti` and `sid`: every
   * token carrying the value is refused while the rule lives.
   */
  readonly issuedBefore: number | null
  /** The operator's reason, for the audit log and listings; never shown to the caller. */
  readonly reason: string | null
  readonly createdAt: number
  /** Who made it (`cli:<user>`, an admin token's fingerprint), when known. */
  readonly createdBy: string | null
  /** When no token it could match is valid any more (epoch ms); deleted after it. */
  readonly expiresAt: number
}

/**
 * When a rule made at `createdAt` (with `issuedBefore` for sub/tenant rules) can match no
 * valid token any more: every token it matches was issued before its bound, and a token is
 * refused beyond `maxLifetimeSec` after `iat` (jwt-claims.ts, `exp - iat`; `exp - now`
 * without `iat`), plus the clock skew allowed on `exp`.
 */
export function jwtRevocationExpiry(
  createdAt: number,
  issuedBefore: number | null,
  maxLifetimeSec: number,
  clockToleranceSec: number,
): number {
  const from = issuedBefore === null ? createdAt : Math.min(createdAt, issuedBefore)
  return from + (maxLifetimeSec + clockToleranceSec) * 1000
}

/** The failure a token refused by a rule gets: `invalid_token` (SPEC rule 4), naming the rule. */
export function revokedByRule(rule: JwtRevocationRule): AuthFailure {
  return {
    code: 'invalid_token',
    reason: 'revoked_by_rule',
    detail: 'the token has been revoked',
    ruleId: rule.id,
  }
}

/** Every live rule of one process, by what it matches. */
export class JwtRevocationSet {
  // Keys are `${issuer}\n${value}`: `\n` cannot be part of an issuer URL the core accepts.
  readonly #maps: Record<JwtRevocationKind, Map<string, JwtRevocationRule>> = {
    jti: new Map(),
    sid: new Map(),
    sub: new Map(),
    tenant: new Map(),
  }
  readonly #byId = new Map<string, JwtRevocationRule>()

  /** How many rules are held. */
  get size(): number {
    return this.#byId.size
  }

  /** Adds a rule, or replaces the one with its id. */
  put(rule: JwtRevocationRule): void {
    this.remove(rule.id)
    this.#byId.set(rule.id, rule)
    this.#maps[rule.kind].set(`${rule.issuer}\n${rule.value}`, rule)
  }

  remove(id: string): void {
    const old = this.#byId.get(id)
    if (old === undefined) return
    this.#byId.delete(id)
    const map = this.#maps[old.kind]
    const key = `${old.issuer}\n${old.value}`
    if (map.get(key) === old) map.delete(key)
  }

  /** Replaces every rule (a full read of the store). */
  replaceAll(rules: readonly JwtRevocationRule[]): void {
    this.#byId.clear()
    for (const map of Object.values(this.#maps)) map.clear()
    for (const rule of rules) this.put(rule)
  }

  rules(): readonly JwtRevocationRule[] {
    return [...this.#byId.values()]
  }

  /**
   * The rule refusing `jwt` at `now`, if any. An expired rule matches nothing (every token it
   * could match has expired too); the store deletes it later.
   */
  match(jwt: VerifiedJwt, now: number): JwtRevocationRule | undefined {
    if (this.#byId.size === 0) return undefined
    const issuer = jwt.issuer
    const live = (rule: JwtRevocationRule | undefined) =>
      rule !== undefined && rule.expiresAt > now ? rule : undefined
    const issuedBefore = (rule: JwtRevocationRule | undefined) =>
      rule !== undefined &&
      rule.expiresAt > now &&
      (jwt.issuedAt === undefined || jwt.issuedAt < (rule.issuedBefore ?? Number.POSITIVE_INFINITY))
        ? rule
        : undefined
    const maps = this.#maps
    return (
      (jwt.tokenId !== undefined && maps.jti.size > 0
        ? live(maps.jti.get(`${issuer}\n${jwt.tokenId}`))
        : undefined) ??
      (jwt.sessionId !== undefined && maps.sid.size > 0
        ? live(maps.sid.get(`${issuer}\n${jwt.sessionId}`))
        : undefined) ??
      (maps.sub.size > 0 ? issuedBefore(maps.sub.get(`${issuer}\n${jwt.subject}`)) : undefined) ??
      (maps.tenant.size > 0
        ? issuedBefore(maps.tenant.get(`${issuer}\n${jwt.tenantId}`))
        : undefined)
    )
  }
}
