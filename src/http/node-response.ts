/**
 * A failure answered on a plain `node:http` response (the decision API, the `node:http`,
 * Express and Hono bindings), byte for byte as the server's Fastify replies send it.
 */
import { Buffer } from 'node:buffer'
import type { ServerResponse } from 'node:http'
import type { FailureResponse } from './problem-response.ts'

/**
 * The headers of a failure response as the server sends them: the response's headers, the
 * media type with `charset=utf-8` (as Fastify writes it), and `X-Request-Id`.
 */
export function failureHeaders(
  response: Pick<FailureResponse, 'headers'>,
  requestId: string,
): Record<string, string> {
  return {
    ...response.headers,
    'content-type': `${response.headers['content-type']}; charset=utf-8`,
    'x-request-id': requestId,
  }
}

/** Writes the failure unless the response has started; `extra` headers are added. */
export function sendFailureResponse(
  res: ServerResponse,
  response: FailureResponse,
  requestId: string,
  extra?: Readonly<Record<string, string>>,
): void {
  if (res.headersSent) return
  const body = JSON.stringify(response.body)
  res.writeHead(response.status, {
    ...failureHeaders(response, requestId),
    ...extra,
    'content-length': Buffer.byteLength(body),
  })
  res.end(body)
}
