import type { LimitState, QuotaState } from '../core/failure.ts'
import type { ProblemDetails } from './problem.ts'
import { PROBLEM_CONTENT_TYPE, PROBLEMS, type ProblemCode, problem } from './problem.ts'
import { rateLimitHeaders } from './rate-limit-headers.ts'

/** An HTTP error response, framework-free: adapters copy it onto their reply object. */
export interface FailureResponse {
  readonly status: number
  /** Lowercase header names. */
  readonly headers: Record<string, string>
  readonly body: ProblemDetails
}

export interface ProblemOptions {
  /** Defaults to the code's status in the problem table; Fastify's own 4xx pass theirs. */
  readonly status?: number
  /** Extra body members (e.g. `errors`, `policy`). */
  readonly extra?: Readonly<Record<string, unknown>>
  /** Extra headers, lowercase names (e.g. `retry-after`, `www-authenticate`). */
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * The one builder of a non-2xx answer: status from the problem table, the RFC 9457 body, and
 * the headers every problem carries (`content-type`, `cache-control: no-store`) plus the
 * kind's own. Why one: answers of the same kind built in different files had drifted apart
 * in their headers.
 *
 * @example
 * problemResponse('not_found', 'No such endpoint.', request.id)
 */
export function problemResponse(
  code: ProblemCode,
  detail: string,
  requestId: string,
  options: ProblemOptions = {},
): FailureResponse {
  return problemResponseWithHeaders(
    code,
    detail,
    requestId,
    problemHeaders(options.headers),
    options,
  )
}

/**
 * `problemResponse` with headers `problemHeaders` already made: for headers shared by many
 * answers (a 401's, made once per challenge), not built again per answer.
 */
export function problemResponseWithHeaders(
  code: ProblemCode,
  detail: string,
  requestId: string,
  headers: Readonly<Record<string, string>>,
  options?: Omit<ProblemOptions, 'headers'>,
): FailureResponse {
  const status = options?.status ?? PROBLEMS[code].status
  return { status, headers, body: problem(status, code, detail, requestId, options?.extra) }
}

/** The headers every problem carries, then the kind's own (the one place they are listed). */
export function problemHeaders(own?: Readonly<Record<string, string>>): Record<string, string> {
  return { 'content-type': PROBLEM_CONTENT_TYPE, 'cache-control': 'no-store', ...own }
}

/** 429 for an exhausted rate-limit policy: `Retry-After` and the policy's RateLimit pair. */
export function rateLimitedResponse(state: LimitState, requestId: string): FailureResponse {
  const detail =
    state.name === 'failed-auth'
      ? `Too many failed authentications from this address; retry in ${state.resetSec} s.`
      : `Rate limit "${state.name}" exceeded (${state.quota} requests per ${state.windowSec} s); retry in ${state.resetSec} s.`
  return problemResponse('rate_limited', detail, requestId, {
    extra: { policy: state.name },
    headers: { ...rateLimitHeaders(state), 'retry-after': String(state.resetSec) },
  })
}

/**
 * 429 for a key whose quota is spent: `Retry-After` when the quota refills (none without
 * refill: retrying will not help), and the quota in the body, so a client can tell it from a
 * rate limit (`code`) and knows when uses come back (`quota.resetsAt`).
 */
export function quotaExhaustedResponse(quota: QuotaState, requestId: string): FailureResponse {
  const resetsAt = quota.resetsAt === null ? null : new Date(quota.resetsAt).toISOString()
  const detail =
    resetsAt === null
      ? `This key's quota of ${quota.limit} uses is spent; it does not refill.`
      : `This key's quota of ${quota.limit} uses is spent until ${resetsAt}.`
  return problemResponse('quota_exhausted', detail, requestId, {
    extra: { quota: { limit: quota.limit, refill: quota.refill, resetsAt } },
    headers:
      quota.retryAfterSec === undefined ? {} : { 'retry-after': String(quota.retryAfterSec) },
  })
}

/** 503 when the store cannot be reached: retry in a few seconds, the request itself is fine. */
export function storeUnavailable(requestId: string): FailureResponse {
  return problemResponse('unavailable', 'The store is not reachable.', requestId, {
    headers: { 'retry-after': '5' },
  })
}

/** The reply methods a refusal is written with (Fastify's reply has them). */
export interface ProblemReply<R> {
  code(status: number): R
  headers(values: Record<string, string>): R
  send(body: unknown): R
}

/**
 * The one way a non-2xx answer built here goes on the wire of a Fastify-shaped reply: its
 * status, its headers, its problem body. Every front end on Fastify (the server, gateway,
 * admin listener, `tokengate/fastify`) answers through it; none imports another for it.
 */
export function sendProblemResponse<R extends ProblemReply<R>>(
  reply: R,
  response: FailureResponse,
): R {
  return reply.code(response.status).headers(response.headers).send(response.body)
}
