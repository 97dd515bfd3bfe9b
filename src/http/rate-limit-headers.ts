import type { LimitState } from '../core/failure.ts'

/**
 * `RateLimit-Policy` and `RateLimit` for one limit (structured fields, RFC 9651), lowercase names:
 * `"per-token";q=1200;w=60` and `"per-token";r=17;t=42`.
 *
 * One consistent pair per response: the caller picks the policy (see `mostConstraining`),
 * so a client never has to reconcile two sets of numbers.
 */
export function rateLimitHeaders(state: LimitState): Record<string, string> {
  return {
    'ratelimit-policy': `"${state.name}";q=${state.quota};w=${state.windowSec}`,
    ratelimit: `"${state.name}";r=${state.remaining};t=${state.resetSec}`,
  }
}

/** The policy a client is closest to exhausting: fewest remaining, then the longest wait. */
export function mostConstraining(a: LimitState, b: LimitState | undefined): LimitState {
  if (!b) return a
  if (a.remaining !== b.remaining) return a.remaining < b.remaining ? a : b
  return a.resetSec >= b.resetSec ? a : b
}
