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
import type { Clock, VerifiedJwt } from './ports.ts'
import { INVALID_TOKEN_DETAIL } from './tenant-rules.ts'

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
    // The generic words of a revoked PAT: the caller learns nothing of the rule.
    detail: INVALID_TOKEN_DETAIL,
    ruleId: rule.id,
  }
}

/** One issuer's rules, by what they match. */
type IssuerRules = Record<JwtRevocationKind, Map<string, JwtRevocationRule>>

/**
 * Every live rule of one process, by issuer and then by what it matches: a cached token's
 * issuer and claim strings are the same objects on every request, so each lookup hashes
 * nothing new and allocates nothing. A token found unmatched is remembered until the set
 * changes (a rule that expires only stops matching, so "no match" stays true until then).
 */
export class JwtRevocationSet {
  readonly #byIssuer = new Map<string, IssuerRules>()
  readonly #byId = new Map<string, JwtRevocationRule>()
  /** Bumped on every change; `#unmatched` holds tokens found unmatched at a version. */
  #version = 0
  #unmatched = new WeakMap<VerifiedJwt, number>()

  /** How many rules are held. */
  get size(): number {
    return this.#byId.size
  }

  /** Adds a rule, or replaces the one with its id. */
  put(rule: JwtRevocationRule): void {
    this.remove(rule.id)
    this.#byId.set(rule.id, rule)
    let rules = this.#byIssuer.get(rule.issuer)
    if (rules === undefined) {
      rules = { jti: new Map(), sid: new Map(), sub: new Map(), tenant: new Map() }
      this.#byIssuer.set(rule.issuer, rules)
    }
    rules[rule.kind].set(rule.value, rule)
    this.#version++
  }

  remove(id: string): void {
    const old = this.#byId.get(id)
    if (old === undefined) return
    this.#byId.delete(id)
    const rules = this.#byIssuer.get(old.issuer)
    if (rules !== undefined && rules[old.kind].get(old.value) === old) {
      rules[old.kind].delete(old.value)
      if (rules.jti.size + rules.sid.size + rules.sub.size + rules.tenant.size === 0) {
        this.#byIssuer.delete(old.issuer)
      }
    }
    this.#version++
  }

  /** Replaces every rule (a full read of the store). */
  replaceAll(rules: readonly JwtRevocationRule[]): void {
    this.#byId.clear()
    this.#byIssuer.clear()
    for (const rule of rules) this.put(rule)
    this.#version++
  }

  rules(): readonly JwtRevocationRule[] {
    return [...this.#byId.values()]
  }

  /**
   * The rule refusing `jwt` now, if any. An expired rule matches nothing (every token it
   * could match has expired too); the store deletes it later. The clock is read only when
   * the token's issuer has rules.
   */
  match(jwt: VerifiedJwt, clock: Clock): JwtRevocationRule | undefined {
    if (this.#byId.size === 0) return undefined
    const rules = this.#byIssuer.get(jwt.issuer)
    if (rules === undefined) return undefined
    if (this.#unmatched.get(jwt) === this.#version) return undefined
    const found = findRule(rules, jwt, clock.now())
    if (found === undefined) this.#unmatched.set(jwt, this.#version)
    return found
  }
}

function findRule(
  rules: IssuerRules,
  jwt: VerifiedJwt,
  now: number,
): JwtRevocationRule | undefined {
  let rule: JwtRevocationRule | undefined
  if (jwt.tokenId !== undefined && rules.jti.size > 0) {
    rule = rules.jti.get(jwt.tokenId)
    if (rule !== undefined && rule.expiresAt > now) return rule
  }
  if (jwt.sessionId !== undefined && rules.sid.size > 0) {
    rule = rules.sid.get(jwt.sessionId)
    if (rule !== undefined && rule.expiresAt > now) return rule
  }
  if (rules.sub.size > 0) {
    rule = rules.sub.get(jwt.subject)
    if (rule !== undefined && issuedBefore(rule, jwt, now)) return rule
  }
  if (rules.tenant.size > 0) {
    rule = rules.tenant.get(jwt.tenantId)
    if (rule !== undefined && issuedBefore(rule, jwt, now)) return rule
  }
  return undefined
}

/** A sub/tenant rule matches tokens issued before its time, and those without `iat`. */
function issuedBefore(rule: JwtRevocationRule, jwt: VerifiedJwt, now: number): boolean {
  return (
    rule.expiresAt > now &&
    (jwt.issuedAt === undefined || rule.issuedBefore === null || jwt.issuedAt < rule.issuedBefore)
  )
}
