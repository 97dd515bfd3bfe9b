import type { FailureCode } from '../core/failure.ts'

/**
 * Failure codes that never reach the wire as themselves: the route policy answers a denied
 * route as an unknown one, a tenant path as a 403 and an ambiguous path as a 400
 * (failure-response.ts). Metrics, logs and audit events keep the precise code.
 */
type PolicyOnlyCode = 'route_denied' | 'tenant_path_mismatch' | 'bad_path'

/** Every problem `code` the project answers with: the auth failures, then the rest. */
export type ProblemCode =
  | Exclude<FailureCode, PolicyOnlyCode>
  | 'validation_failed'
  | 'invalid_request'
  | 'headers_too_large'
  | 'not_found'
  | 'method_not_allowed'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'invalid_signature'
  | 'request_timeout'
  | 'rate_limited'
  | 'internal_error'
  | 'bad_gateway'
  | 'gateway_timeout'

/**
 * An RFC 9457 problem details body (`application/problem+json`). `code` is the stable
 * snake_case code clients branch on; `requestId` matches the server's log line. Extra
 * members (e.g. `required` on a 403) may be added, but never replace the standard ones.
 */
export interface ProblemDetails {
  readonly type: string
  readonly title: string
  readonly status: number
  readonly detail: string
  readonly code: ProblemCode
  readonly requestId: string
  readonly [member: string]: unknown
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'

/** Base of every problem `type` URI; each code's page is listed in docs/errors.md. */
export const PROBLEM_TYPE_BASE = 'https://tokengate.dev/problems/'

/**
 * The one table of problem codes: each code's usual status and its title. A title is the
 * same for every occurrence of a code (RFC 9457 §3.1.4); specifics go in `detail`.
 */
export const PROBLEMS: Readonly<Record<ProblemCode, { status: number; title: string }>> = {
  missing_authorization: { status: 401, title: 'Authorization required' },
  malformed_authorization: { status: 401, title: 'Malformed Authorization header' },
  invalid_token: { status: 401, title: 'Invalid access token' },
  token_expired: { status: 401, title: 'Access token expired' },
  tenant_header_required: { status: 401, title: 'X-Tenant-Id header required' },
  tenant_mismatch: { status: 401, title: 'Tenant mismatch' },
  insufficient_permission: { status: 403, title: 'Insufficient permission' },
  validation_failed: { status: 400, title: 'Invalid request' },
  invalid_request: { status: 400, title: 'More than one credential' },
  headers_too_large: { status: 431, title: 'Request header fields too large' },
  not_found: { status: 404, title: 'Not found' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  payload_too_large: { status: 413, title: 'Payload too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported media type' },
  invalid_signature: { status: 403, title: 'Invalid signature' },
  request_timeout: { status: 408, title: 'Request timeout' },
  rate_limited: { status: 429, title: 'Too many requests' },
  quota_exhausted: { status: 429, title: 'Quota exhausted' },
  internal_error: { status: 500, title: 'Internal server error' },
  bad_gateway: { status: 502, title: 'Bad gateway' },
  unavailable: { status: 503, title: 'Service temporarily unavailable' },
  gateway_timeout: { status: 504, title: 'Gateway timeout' },
}

/** The stable `type` URI of a problem code. */
export function problemType(code: ProblemCode): string {
  return PROBLEM_TYPE_BASE + code
}

/**
 * Builds the body of every error response of the project.
 *
 * `detail` must be client-safe: never a token, a stack trace, `error.message` of an
 * unexpected error, or internal names (key ids, issuer URLs, SQL). Extra members cannot
 * overwrite the standard ones.
 *
 * @example
 * reply.code(404).type(PROBLEM_CONTENT_TYPE)
 *   .send(problem(404, 'not_found', 'No route matches GET /api/v1/nope.', req.id))
 */
export function problem(
  status: number,
  code: ProblemCode,
  detail: string,
  requestId: string,
  extra?: Readonly<Record<string, unknown>>,
): ProblemDetails {
  const standard = {
    type: problemType(code),
    title: PROBLEMS[code].title,
    status,
    detail,
    code,
    requestId,
  }
  // The usual refusal has no extras: the standard members as they are (the spreads below
  // cost a 401 more than the rest of its body, issue #36).
  if (extra === undefined) return standard
  // Standard members first (readable bodies), then extras, then the standard values again so
  // an extra named like a standard member can never replace it.
  return { ...standard, ...extra, ...standard }
}
