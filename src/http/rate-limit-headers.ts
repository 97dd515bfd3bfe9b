import type { LimitState } from '../core/failure.ts'

/**
 * `RateLimit-Policy` and `RateLimit` for one limit (structured fields, RFC 9651), lowercase names:
 * `"per-token";q=1200;w=60` and `"per-token";r=17;t=42`.
 *
 * One consistent pair per response: the caller picks the policy (see `mostConstraining`),
 * so a client never has to reconcile two sets of numbers.
 */
export function rateLimitHeaders(state: LimitState): Record<string, string> {
  const policy = policyOf(state)
  return {
    'ratelimit-policy': policy.value,
    ratelimit: `${policy.remainingPrefix}${decimal(state.remaining)};t=${state.resetSec}`,
  }
}

/**
 * A count as decimal digits, the same text as `String(count)`, without V8's number-string
 * cache: `remaining` is a new number on almost every response, and the cache kept each string
 * alive into the old space. `toFixed(0)` is that text for integers below 1e21.
 */
function decimal(count: number): string {
  return Number.isSafeInteger(count) ? count.toFixed(0) : String(count)
}

// The last policy's `RateLimit-Policy` value and the start of its `RateLimit` value: a
// server's responses mostly show one policy, so those strings are built once, not per
// response; a different policy replaces them.
let lastPolicy = { name: '', quota: -1, windowSec: -1, value: '', remainingPrefix: '' }

function policyOf(state: LimitState): typeof lastPolicy {
  const last = lastPolicy
  if (
    state.quota === last.quota &&
    state.windowSec === last.windowSec &&
    state.name === last.name
  ) {
    return last
  }
  lastPolicy = {
    name: state.name,
    quota: state.quota,
    windowSec: state.windowSec,
    value: `"${state.name}";q=${state.quota};w=${state.windowSec}`,
    remainingPrefix: `"${state.name}";r=`,
  }
  return lastPolicy
}

/** The policy a client is closest to exhausting: fewest remaining, then the longest wait. */
export function mostConstraining(a: LimitState, b: LimitState | undefined): LimitState {
  if (!b) return a
  return firstConstrainsMore(a.remaining, a.resetSec, b.remaining, b.resetSec) ? a : b
}

/** `mostConstraining`'s rule on the numbers alone (the limiter builds only the state it shows). */
export function firstConstrainsMore(
  remainingA: number,
  resetSecA: number,
  remainingB: number,
  resetSecB: number,
): boolean {
  if (remainingA !== remainingB) return remainingA < remainingB
  return resetSecA >= resetSecB
}
