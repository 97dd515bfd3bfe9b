/**
 * `tokengate/express`: the gate as Express 5 middleware. Only types are imported from
 * Express, so this module loads without it (`express` is an optional peer dependency).
 *
 * @example
 * import express from 'express'
 * import { createTokengate } from 'tokengate'
 * import { requirePermission, tokengate } from 'tokengate/express'
 * const gate = await createTokengate({ dataDir: '.tokengate' })
 * const app = express()
 * app.use('/api/v1', tokengate(gate))
 * app.get('/api/v1/projects', requirePermission('projects:read'), (req, res) => {
 *   res.json({ tenant: req.principal?.tenantId })
 * })
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express'
import {
  type Gate,
  type GateRequest,
  type GateSource,
  gateFrom,
  type Outcome,
  type Refused,
} from '../auth/gate.ts'
import type { Principal } from '../core/principal.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { pathOf } from '../http/api-path.ts'
import { failureHeaders } from '../http/node-response.ts'
import { peerCertificateOf } from '../http/peer-certificate.ts'
import { isPreflightOf, PREFLIGHT_ANSWER, type PreflightRule } from '../http/preflight.ts'
import { requestIdOf } from '../http/request-id.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'

export type { Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { Principal } from '../core/principal.ts'

declare global {
  namespace Express {
    interface Request {
      /** The authenticated caller, set by the `tokengate()` middleware. */
      principal?: Principal
    }
    interface Locals {
      /** The authenticated caller (same as `req.principal`), set by `tokengate()`. */
      principal?: Principal
    }
  }
}

export type TokengateExpressOptions = GateSource & {
  /**
   * Check only requests whose path (`req.originalUrl` without the query) starts with this,
   * e.g. `/api/v1/`; others pass untouched. Default: every request reaching the middleware.
   */
  readonly prefix?: string
  /** A CORS preflight: answered 204 (default) or handed on unchecked (http/preflight.ts). */
  readonly preflight?: PreflightRule
}

/** The gate and request a `tokengate()` allowed, for `requirePermission`'s later check. */
const checked = new WeakMap<Request, { gate: Gate; request: GateRequest }>()

/**
 * Checks each request with the gate and sets `req.principal`; a refusal is answered at once
 * with the server's problem body and headers. Every request it checks gets `X-Request-Id`.
 */
export function tokengate(options: TokengateExpressOptions): RequestHandler {
  const gate = gateFrom(options)
  const { prefix, preflight = 'answer' } = options
  return function tokengateMiddleware(req: Request, res: Response, next: NextFunction) {
    if (prefix !== undefined && !pathOf(req.originalUrl).startsWith(prefix)) return next()
    if (isPreflightOf(req.method, (name) => req.headers[name])) {
      if (preflight === 'pass') return next()
      return void res.status(PREFLIGHT_ANSWER.status).set(PREFLIGHT_ANSWER.headers).end()
    }
    const requestId = requestIdOf(req.headers['x-request-id'])
    res.setHeader('x-request-id', requestId)
    const request = gateRequestOf(req, requestId)
    const apply = (outcome: Outcome) => {
      if (!outcome.allowed) return sendRefused(res, outcome)
      req.principal = outcome.principal
      res.locals.principal = outcome.principal
      res.set(outcome.headers)
      checked.set(req, { gate, request })
      next()
    }
    const outcome = gate.check(request)
    if (!isPromiseLike(outcome)) return apply(outcome)
    outcome.then(apply, next)
  }
}

/**
 * Route middleware: 403 unless the caller holds every permission, recorded by the gate that
 * allowed the request. Without `tokengate()` before it, it fails closed: the request reaches
 * Express' error handler (500) instead of the route.
 */
export function requirePermission(...permissions: string[]): RequestHandler {
  const required = Object.freeze([...permissions])
  return function requirePermissionMiddleware(req: Request, res: Response, next: NextFunction) {
    const allowed = checked.get(req)
    if (!allowed || !req.principal) {
      return next(new Error('requirePermission: no principal; mount tokengate() before it'))
    }
    const refused = allowed.gate.authorize(allowed.request, req.principal, required)
    if (!refused) return next()
    sendRefused(res, refused)
  }
}

/** Answers a refusal exactly as the server does (no ETag, no content negotiation). */
export function sendRefused(res: Response, refused: Refused): void {
  res.status(refused.status).set(failureHeaders(refused, refused.body.requestId))
  res.end(JSON.stringify(refused.body))
}

/** rawHeaders: two `Authorization` or `X-Tenant-Id` lines are seen as two, and refused. */
function gateRequestOf(req: Request, requestId: string): GateRequest {
  const { authorization, tenantIds } = readAuthHeaders(req.rawHeaders)
  return {
    method: req.method,
    target: req.originalUrl,
    authorization,
    tenantIds,
    clientAddress: req.ip ?? req.socket.remoteAddress ?? '',
    headers: req.rawHeaders,
    peerCertificate: peerCertificateOf(req.socket),
    requestId,
  }
}
