/** Wire details shared by the adapters, so that they answer exactly like the server. */
import { randomUUID } from 'node:crypto'
import type { FailureResponse } from '../http/failure-response.ts'

/** Same rule as the server: a caller's `X-Request-Id` is kept only when it is this safe. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/**
 * The request id of a request: the caller's `X-Request-Id` when it is 1–128 characters of
 * `[A-Za-z0-9._:-]`, otherwise a new UUID. Why the check: the id is echoed in a response
 * header, the problem body and logs, so a caller must not be able to put arbitrary text there.
 */
export function requestIdFrom(header: string | readonly string[] | null | undefined): string {
  const value = typeof header === 'string' ? header : undefined
  return value !== undefined && REQUEST_ID.test(value) ? value : randomUUID()
}

/**
 * The headers of a failure response as the server sends them: `failureResponse`'s headers,
 * the media type with `charset=utf-8` (as Fastify writes it), and `X-Request-Id`.
 */
export function failureHeaders(
  response: FailureResponse,
  requestId: string,
): Record<string, string> {
  return {
    ...response.headers,
    'content-type': `${response.headers['content-type']}; charset=utf-8`,
    'x-request-id': requestId,
  }
}
