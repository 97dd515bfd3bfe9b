import type { AuthFailure } from '../core/failure.ts'
import { bearerChallenge } from './challenge.ts'
import type { ProblemCode } from './problem.ts'
import {
  type FailureResponse,
  problemHeaders,
  problemResponse,
  problemResponseWithHeaders,
  quotaExhaustedResponse,
  rateLimitedResponse,
} from './problem-response.ts'

export type { FailureResponse } from './problem-response.ts'

const DETAIL = {
  missing: 'Send an Authorization header: "Bearer <token>".',
  tenantRequired: 'A JWT access token must be sent with an X-Tenant-Id header naming its tenant.',
  unavailable:
    'A service needed to authenticate this request is temporarily unavailable. Retry later.',
  notFound: 'No such endpoint.',
  tenantPath:
    "The path names a tenant other than the caller's; a token acts only for its own tenant.",
} as const

/**
 * Turns an `AuthFailure` into status, headers and an RFC 9457 body: the only place a failure
 * becomes wire format (STYLE.md §6, docs/errors.md).
 *
 * - 401s carry `WWW-Authenticate: Bearer realm="tokengate"` and, except for a missing header
 *   (RFC 6750 §3.1: no error code when no credentials were sent), an `error` code;
 * - 403 carries `error="insufficient_scope"` and the required permissions as `scope`;
 * - 503 carries `Retry-After` and no challenge: the credentials may be fine;
 * - 429 carries `Retry-After` and the exhausted limit's RateLimit pair; an exhausted quota
 *   (a valid key out of uses, never a 401) `Retry-After` at its next refill, none without;
 * - the route policy's refusals: a denied route is exactly an unknown path (404), so the
 *   policy never reveals which upstream routes exist; a tenant path of another tenant is a
 *   403 without `scope` (no permission would help); an ambiguous path is a 400.
 *
 * The body's `detail` is the failure's client-safe detail; `reason`, the dependency name and
 * anything else internal stay out of the response. `cache-control: no-store` keeps shared
 * caches from replaying a per-credential answer.
 */
export function failureResponse(failure: AuthFailure, requestId: string): FailureResponse {
  switch (failure.code) {
    case 'missing_authorization':
      return unauthorized(failure.code, DETAIL.missing, bearerChallenge(), requestId)
    case 'malformed_authorization':
      return unauthorized(
        failure.code,
        failure.detail,
        bearerChallenge({ error: 'invalid_request', errorDescription: failure.detail }),
        requestId,
      )
    case 'invalid_token':
    case 'token_expired':
    case 'tenant_mismatch':
      return unauthorized(failure.code, failure.detail, invalidToken(failure.detail), requestId)
    case 'tenant_header_required':
      return unauthorized(
        failure.code,
        DETAIL.tenantRequired,
        invalidToken(DETAIL.tenantRequired),
        requestId,
      )
    case 'invalid_request':
      return problemResponse(failure.code, failure.detail, requestId, {
        headers: {
          'www-authenticate': memoised(
            invalidRequestChallenges,
            failure.detail,
            invalidRequestChallenge,
          ),
        },
      })
    case 'insufficient_permission': {
      const scope = failure.required.join(' ')
      const detail = `This request requires the permission(s): ${scope}.`
      return problemResponse(failure.code, detail, requestId, {
        extra: { required: [...failure.required] },
        headers: {
          'www-authenticate': memoised(scopeChallenges, scope, scopeChallenge),
        },
      })
    }
    case 'unavailable':
      return problemResponse(failure.code, DETAIL.unavailable, requestId, {
        headers: { 'retry-after': String(failure.retryAfterSeconds) },
      })
    case 'rate_limited':
      return rateLimitedResponse(failure.limit, requestId)
    case 'quota_exhausted':
      return quotaExhaustedResponse(failure.quota, requestId)
    case 'route_denied':
      return problemResponse('not_found', DETAIL.notFound, requestId)
    case 'tenant_path_mismatch':
      return problemResponse('insufficient_permission', DETAIL.tenantPath, requestId, {
        headers: { 'www-authenticate': TENANT_PATH_CHALLENGE },
      })
    case 'bad_path':
      return problemResponse('validation_failed', failure.detail, requestId)
    default:
      return failure satisfies never
  }
}

function invalidToken(description: string): string {
  return memoised(invalidTokenChallenges, description, invalidTokenChallenge)
}

// Module functions, not arrows at the call: no closure per refusal.
function invalidTokenChallenge(description: string): string {
  return bearerChallenge({ error: 'invalid_token', errorDescription: description })
}
function invalidRequestChallenge(detail: string): string {
  return bearerChallenge({ error: 'invalid_request', errorDescription: detail })
}
function scopeChallenge(scope: string): string {
  return bearerChallenge({ error: 'insufficient_scope', scope })
}

/**
 * Challenges by their inputs, one map per challenge kind. Why: floods of bad tokens and of
 * forbidden calls are the rejections that have to stay cheap, and quoting the same text for
 * every request (two regular-expression passes) showed in their profiles. Keyed by the text
 * itself, a fixed string whose hash is kept, not a key joined per request (issue #36). Details
 * and scopes are our own fixed texts (a few dozen), so this never grows; the bound is a guard.
 */
function memoised<T>(challenges: Map<string, T>, key: string, build: (key: string) => T): T {
  let challenge = challenges.get(key)
  if (challenge === undefined) {
    challenge = build(key)
    if (challenges.size >= MAX_MEMOISED_CHALLENGES) challenges.clear()
    challenges.set(key, challenge)
  }
  return challenge
}

const invalidTokenChallenges = new Map<string, string>()
const invalidRequestChallenges = new Map<string, string>()
const scopeChallenges = new Map<string, string>()
const TENANT_PATH_CHALLENGE = bearerChallenge({ error: 'insufficient_scope' })
const MAX_MEMOISED_CHALLENGES = 256

/**
 * A 401: what `problemResponse` builds with the challenge as its one extra header, the headers
 * made once per challenge and shared (frozen: a caller that wrote to them would throw, not
 * change every later 401). Why: a flood of bad tokens answers with a handful of challenges,
 * and an options object, a headers object and their spread per refusal were its own
 * allocations (issue #36).
 */
function unauthorized(
  code: Extract<ProblemCode, AuthFailure['code']>,
  detail: string,
  challenge: string,
  requestId: string,
): FailureResponse {
  const headers = memoised(challengeHeaders, challenge, unauthorizedHeaders)
  return problemResponseWithHeaders(code, detail, requestId, headers)
}

function unauthorizedHeaders(challenge: string): Readonly<Record<string, string>> {
  return Object.freeze(problemHeaders({ 'www-authenticate': challenge }))
}

const challengeHeaders = new Map<string, Readonly<Record<string, string>>>()
