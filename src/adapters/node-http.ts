/**
 * `tokengate/node-http`: the gate for a plain `node:http` / `node:https` server.
 *
 * @example
 * import { createServer } from 'node:http'
 * import { createTokengate } from 'tokengate'
 * import { checkRequest, requestIdOf, sendRefused } from 'tokengate/node-http'
 * const gate = await createTokengate({ dataDir: '.tokengate' })
 * createServer(async (req, res) => {
 *   const requestId = requestIdOf(req)
 *   const outcome = await checkRequest(req, gate, { requestId, permissions: ['projects:read'] })
 *   if (!outcome.allowed) return sendRefused(res, outcome)
 *   res.end(JSON.stringify({ tenant: outcome.principal.tenantId }))
 * })
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { type Gate, type GateSource, gateFrom, type Outcome, type Refused } from '../auth/gate.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { sendFailureResponse } from '../http/node-response.ts'
import { peerCertificateOf } from '../http/peer-certificate.ts'
import { isPreflightOf } from '../http/preflight.ts'
import { requestIdOf as requestIdRule } from '../http/request-id.ts'
import type { MaybePromise } from '../lib/maybe-async.ts'

export type { Allowed, Outcome, Refused } from '../auth/gate.ts'
export type { Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { AuthResult, Principal } from '../core/principal.ts'

export interface CheckOptions {
  /** The request's id (`requestIdOf(req)`), echoed in a refusal. */
  readonly requestId: string
  /** Permissions the route requires; all must be held (403 otherwise). */
  readonly permissions?: readonly string[]
}

/** Gates of bare authenticators, one per authenticator object. */
const gates = new WeakMap<object, Gate>()

/**
 * Checks a request with the gate: `req.rawHeaders` (so two `Authorization` or `X-Tenant-Id`
 * lines are seen as two), the target and the peer address. A value when nothing had to
 * wait, else a promise; `await` takes either. Never rejects for a bad request.
 */
export function checkRequest(
  req: Pick<IncomingMessage, 'rawHeaders' | 'method' | 'url' | 'socket'>,
  source: GateSource,
  options: CheckOptions,
): MaybePromise<Outcome> {
  let gate = gates.get(source)
  if (gate === undefined) {
    gate = gateFrom(source)
    gates.set(source, gate)
  }
  const { authorization, tenantIds } = readAuthHeaders(req.rawHeaders)
  return gate.check({
    method: req.method ?? 'GET',
    target: req.url ?? '/',
    authorization,
    tenantIds,
    clientAddress: req.socket.remoteAddress ?? '',
    headers: req.rawHeaders,
    peerCertificate: peerCertificateOf(req.socket),
    requestId: options.requestId,
    access: options.permissions ? { permissions: options.permissions } : undefined,
  })
}

/**
 * Whether a request is a CORS preflight, which is never checked (http/preflight.ts): answer
 * it 204 or hand it to your CORS handling before calling `checkRequest`.
 */
export function isPreflightRequest(req: Pick<IncomingMessage, 'method' | 'headers'>): boolean {
  return isPreflightOf(req.method, (name) => req.headers[name])
}

/** The request's id: a safe incoming `X-Request-Id` (the server's one rule), or a new one. */
export function requestIdOf(req: Pick<IncomingMessage, 'headers'>): string {
  return requestIdRule(req.headers['x-request-id'])
}

/**
 * Answers a refusal with the server's problem body and headers (status, `WWW-Authenticate`,
 * `Retry-After`, `Cache-Control: no-store`, `X-Request-Id`). Does nothing if the response
 * has already started.
 */
export function sendRefused(res: ServerResponse, refused: Refused): void {
  sendFailureResponse(res, refused, refused.body.requestId)
}
