/**
 * `tokengate/node-http`: the auth core for a plain `node:http` / `node:https` server.
 *
 * @example
 * import { createServer } from 'node:http'
 * import { authenticateRequest, authorize, requestIdOf, sendFailure } from 'tokengate/node-http'
 * createServer(async (req, res) => {
 *   const requestId = requestIdOf(req)
 *   const result = await authenticateRequest(req, authenticate)
 *   if (!result.ok) return sendFailure(res, result.failure, requestId)
 *   const denied = authorize(result.principal, ['projects:read'])
 *   if (denied) return sendFailure(res, denied, requestId)
 *   res.end(JSON.stringify({ tenant: result.principal.tenantId }))
 * })
 */
import { Buffer } from 'node:buffer'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { type AuthenticateMaybeSync, isPromiseLike } from '../core/authenticate.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { AuthResult } from '../core/principal.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { failureResponse } from '../http/failure-response.ts'
import { ONE_METHOD_FAILURE, queryHasAccessToken } from '../http/one-method.ts'
import { failureHeaders, requestIdFrom } from './wire.ts'

export type { FailureContext, Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export { authorize } from '../core/authorize.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { AuthResult, Principal } from '../core/principal.ts'

/**
 * Authenticates a request from its raw headers (`req.rawHeaders`, so that two
 * `Authorization` or `X-Tenant-Id` lines are seen as two). Never rejects for a bad request.
 * With `createTokengate(...).authenticate` a cache hit is answered synchronously (a value);
 * `await` takes either. A token also sent as an `access_token` query parameter in `req.url`
 * is refused (400 `invalid_request`, RFC 6750 §2), as the server does.
 */
export function authenticateRequest(
  req: Pick<IncomingMessage, 'rawHeaders'> & { readonly url?: string | undefined },
  authenticate: AuthenticateMaybeSync,
): AuthResult | Promise<AuthResult> {
  const result = authenticate(readAuthHeaders(req.rawHeaders))
  const url = req.url
  if (url === undefined || !queryHasAccessToken(url)) return result
  return isPromiseLike(result) ? result.then(oneMethodOnly) : oneMethodOnly(result)
}

/** A successful result refused for its second copy of the token; a failure kept as it is. */
function oneMethodOnly(result: AuthResult): AuthResult {
  return result.ok ? { ok: false, failure: ONE_METHOD_FAILURE } : result
}

/** The request's id: a safe incoming `X-Request-Id`, or a new UUID. */
export function requestIdOf(req: Pick<IncomingMessage, 'headers'>): string {
  return requestIdFrom(req.headers['x-request-id'])
}

/**
 * Answers an `AuthFailure` with the server's problem body and headers (status,
 * `WWW-Authenticate`, `Retry-After`, `Cache-Control: no-store`, `X-Request-Id`), through the
 * project's single wire mapping. Does nothing if the response has already started.
 */
export function sendFailure(res: ServerResponse, failure: AuthFailure, requestId: string): void {
  if (res.headersSent) return
  const response = failureResponse(failure, requestId)
  const body = JSON.stringify(response.body)
  res.writeHead(response.status, {
    ...failureHeaders(response, requestId),
    'content-length': Buffer.byteLength(body),
  })
  res.end(body)
}
