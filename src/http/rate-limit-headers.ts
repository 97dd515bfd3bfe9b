/**
 * The state of one rate-limit policy for one request, as the IETF RateLimit header fields
 * describe it (draft-ietf-httpapi-ratelimit-headers, structured-field syntax, RFC 9651).
 */
export interface PolicyState {
  /** Policy name, e.g. `per-token`: `[a-z-]` only, so it is a valid sf-string as is. */
  readonly name: string
  /** Quota: requests allowed per window. */
  readonly quota: number
  readonly windowSec: number
  /** Requests left in the current window (0 when exceeded). */
  readonly remaining: number
  /** Seconds until the current window ends (≥ 1 while a window is open). */
  readonly resetSec: number
}

/**
 * `RateLimit-Policy` and `RateLimit` for one policy, lowercase names:
 * `"per-token";q=1200;w=60` and `"per-token";r=17;t=42`.
 *
 * One consistent pair per response: the caller picks the policy (see `mostConstraining`),
 * so a client never has to reconcile two sets of numbers.
 */
export function rateLimitHeaders(state: PolicyState): Record<string, string> {
  return {
    'ratelimit-policy': `"${state.name}";q=${state.quota};w=${state.windowSec}`,
    ratelimit: `"${state.name}";r=${state.remaining};t=${state.resetSec}`,
  }
}

/** The policy a client is closest to exhausting: fewest remaining, then the longest wait. */
export function mostConstraining(a: PolicyState, b: PolicyState | undefined): PolicyState {
  if (!b) return a
  if (a.remaining !== b.remaining) return a.remaining < b.remaining ? a : b
  return a.resetSec >= b.resetSec ? a : b
}
