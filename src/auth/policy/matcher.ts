import { sameTenantId } from '../../core/authenticate.ts'
import { authorize } from '../../core/authorize.ts'
import type { AuthFailure } from '../../core/failure.ts'
import type { Principal } from '../../core/principal.ts'
import { asciiLowerCase, canonicalRequestTarget } from '../../http/request-target.ts'
import type { Policy, PolicyRule } from './policy.ts'

/** What the policy says about one authenticated request. */
export type PolicyDecision =
  /** Proxy it. `rule` is undefined when the default applied. */
  | { readonly outcome: 'allow'; readonly rule: PolicyRule | undefined }
  /** A `deny` rule, or `default: deny` (rule undefined): answered like an unknown path. */
  | { readonly outcome: 'deny'; readonly rule: PolicyRule | undefined }
  /** The rule's `tenantParam` segment is not the caller's tenant. */
  | { readonly outcome: 'tenant_mismatch'; readonly rule: PolicyRule }
  /** A permission the rule requires is not held. */
  | { readonly outcome: 'forbidden'; readonly rule: PolicyRule; readonly failure: AuthFailure }
  /** A path the gateway refuses to interpret (see `splitRequestPath`). */
  | { readonly outcome: 'bad_path'; readonly reason: string }

export interface PolicyMatcher {
  /**
   * Decides for one request. `path` is the raw request path, without the query string;
   * `segments`, when the caller has read them already, are its `canonicalRequestTarget`
   * segments (the path is then not read again). The first rule whose methods and path
   * match decides; no match means `policy.default`.
   */
  decide(
    method: string,
    path: string,
    principal: Principal,
    segments?: readonly string[],
  ): PolicyDecision
}

type Segment = { readonly literal: string } | { readonly param: string }

interface CompiledRule {
  readonly rule: PolicyRule
  /** null: every method. */
  readonly methods: ReadonlySet<string> | null
  readonly segments: readonly Segment[]
  /** The pattern ends in `*`: any number of further segments, including none. */
  readonly rest: boolean
  /** Index in `segments` of the `tenantParam` segment, or -1. */
  readonly tenantIndex: number
}

/**
 * Compiles a validated policy into a matcher. Rules are pre-split once; a decision is a
 * linear scan comparing segment arrays, with no regular expressions on the request path.
 *
 * @example
 * const matcher = createPolicyMatcher(await loadPolicy('policy.yaml'))
 * const decision = matcher.decide('GET', '/api/v1/projects/42', principal)
 */
export function createPolicyMatcher(policy: Policy): PolicyMatcher {
  // ASCII-only folding: Unicode case mapping differs between stacks (see request-target.ts).
  const fold = policy.caseSensitive ? (s: string) => s : asciiLowerCase
  const rules = policy.rules.map((rule) => compileRule(rule, fold))
  const denyByDefault = policy.default === 'deny'

  return {
    decide(method, path, principal, known) {
      let segments = known
      if (segments === undefined) {
        const split = splitRequestPath(path)
        if (!split.ok) return { outcome: 'bad_path', reason: split.reason }
        segments = split.segments
      }
      // Folded only for rules to compare with (a policy without rules needs no copy).
      const folded = rules.length === 0 ? segments : segments.map(fold)
      for (const compiled of rules) {
        if (!methodMatches(compiled.methods, method)) continue
        if (!pathMatches(compiled, folded)) continue
        const rule = compiled.rule
        if (rule.deny) return { outcome: 'deny', rule }
        if (compiled.tenantIndex >= 0) {
          // Why exact, unfolded comparison: tenant ids are compared byte for byte everywhere
          // (DESIGN rule 6); case-folding here would let `/tenants/ACME` act for `acme`.
          const named = segments[compiled.tenantIndex] as string
          if (!sameTenantId(named, principal.tenantId)) return { outcome: 'tenant_mismatch', rule }
        }
        const failure = authorize(principal, rule.permissions)
        if (failure) return { outcome: 'forbidden', rule, failure }
        return { outcome: 'allow', rule }
      }
      return denyByDefault ? DEFAULT_DENY : DEFAULT_ALLOW
    },
  }
}

// The default's decisions, shared: nothing in a decision is per request.
const DEFAULT_DENY: PolicyDecision = Object.freeze({ outcome: 'deny', rule: undefined })
const DEFAULT_ALLOW: PolicyDecision = Object.freeze({ outcome: 'allow', rule: undefined })

function compileRule(rule: PolicyRule, fold: (s: string) => string): CompiledRule {
  const parts = rule.path.slice(1).split('/')
  const rest = parts[parts.length - 1] === '*'
  if (rest || parts[parts.length - 1] === '') parts.pop()
  const segments: Segment[] = parts.map((part) =>
    part.startsWith(':') ? { param: part.slice(1) } : { literal: fold(part) },
  )
  const tenantIndex =
    rule.tenantParam === undefined
      ? -1
      : segments.findIndex((s) => 'param' in s && s.param === rule.tenantParam)
  let methods: Set<string> | null = null
  if (rule.methods !== '*') {
    methods = new Set(rule.methods)
    // HEAD is GET without a body, and upstream frameworks answer it with the GET handler;
    // without this a GET-only rule would let HEAD fall through to a weaker default.
    if (methods.has('GET')) methods.add('HEAD')
  }
  return { rule, methods, segments, rest, tenantIndex }
}

function methodMatches(methods: ReadonlySet<string> | null, method: string): boolean {
  return methods === null || methods.has(method)
}

function pathMatches(compiled: CompiledRule, folded: readonly string[]): boolean {
  const { segments, rest } = compiled
  if (rest ? folded.length < segments.length : folded.length !== segments.length) return false
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i] as Segment
    if ('literal' in segment && segment.literal !== folded[i]) return false
  }
  return true
}

export type SplitPath =
  | { readonly ok: true; readonly segments: readonly string[] }
  | { readonly ok: false; readonly reason: string }

/**
 * Splits a raw request path into percent-decoded segments, or refuses it: the policy
 * decides on the one reading of `canonicalRequestTarget` (src/http/request-target.ts).
 */
export function splitRequestPath(path: string): SplitPath {
  const target = canonicalRequestTarget(path)
  return target.ok ? { ok: true, segments: target.segments } : target
}
