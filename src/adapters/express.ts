/**
 * `tokengate/express`: the auth core as Express 5 middleware.
 *
 * Only types are imported from Express, so this module loads without it; `express` is an
 * optional peer dependency.
 *
 * @example
 * import express from 'express'
 * import { requirePermission, tokengate } from 'tokengate/express'
 * const app = express()
 * const gate = await createTokengate({ dataDir: '.tokengate' }) // from 'tokengate'
 * app.use(tokengate({ ...gate, prefix: '/api/v1/' }))
 * app.get('/api/v1/projects', requirePermission('projects:read'), (req, res) => {
 *   res.json({ tenant: req.principal?.tenantId })
 * })
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express'
import type { FailureContext } from '../auth/tokengate.ts'
import { type AuthenticateMaybeSync, isPromiseLike } from '../core/authenticate.ts'
import { authorize } from '../core/authorize.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { AuthResult, Principal } from '../core/principal.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { pathOf } from '../http/api-path.ts'
import { failureResponse } from '../http/failure-response.ts'
import { ONE_METHOD_FAILURE, queryHasAccessToken } from '../http/one-method.ts'
import { failureHeaders, requestIdFrom } from './wire.ts'

export type { FailureContext, Tokengate } from '../auth/tokengate.ts'
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

export interface TokengateExpressOptions {
  /**
   * The authentication pipeline: `createTokengate(...).authenticate`, or your own
   * `createAuthenticator` / `createMaybeSyncAuthenticator`.
   */
  readonly authenticate: AuthenticateMaybeSync
  /**
   * Authenticate only requests whose path (`req.originalUrl` without the query) starts with
   * this, e.g. `/api/v1/`; others pass untouched. Default: every request reaching it.
   */
  readonly prefix?: string
  /** Called after a successful authentication. */
  readonly onAuthenticated?: (req: Request, principal: Principal) => void
  /** Called for every failure answered (401, 403, 503). */
  readonly onFailure?: (req: Request, failure: AuthFailure) => void
  /** Audits a refused request: `createTokengate`'s, passed along by `tokengate(gate)`. */
  readonly recordFailure?: (failure: AuthFailure, context: FailureContext) => void
}

/** The audit of the `tokengate()` that authenticated a request, for `requirePermission`'s 403. */
const auditors = new WeakMap<Request, NonNullable<TokengateExpressOptions['recordFailure']>>()

/**
 * Authenticates each request from its raw headers and sets `req.principal`; a failure is
 * answered at once with the server's problem body and headers (status, `WWW-Authenticate`,
 * `Cache-Control: no-store`, `X-Request-Id`). Every response it sees gets `X-Request-Id`.
 */
export function tokengate(options: TokengateExpressOptions): RequestHandler {
  const { authenticate, prefix } = options
  return function tokengateMiddleware(req: Request, res: Response, next: NextFunction) {
    if (prefix !== undefined && !pathOf(req.originalUrl).startsWith(prefix)) return next()
    if (options.onFailure) failureHooks.set(req, options.onFailure)
    const requestId = ensureRequestId(req, res)
    const answer = (result: AuthResult) => {
      if (!result.ok) return refuse(req, res, result.failure, requestId)
      if (queryHasAccessToken(req.originalUrl)) {
        return refuse(req, res, ONE_METHOD_FAILURE, requestId)
      }
      req.principal = result.principal
      res.locals.principal = result.principal
      if (options.recordFailure) auditors.set(req, options.recordFailure)
      options.onAuthenticated?.(req, result.principal)
      next()
    }
    // rawHeaders, not req.headers: Node keeps only the first of two Authorization lines and
    // joins repeated X-Tenant-Id values, which would hide a request carrying two of them.
    const result = authenticate(readAuthHeaders(req.rawHeaders))
    if (!isPromiseLike(result)) return answer(result)
    result.then(answer, next)
  }

  function refuse(req: Request, res: Response, failure: AuthFailure, requestId: string) {
    options.onFailure?.(req, failure)
    options.recordFailure?.(failure, failureContext(req, requestId))
    sendFailure(res, failure, requestId)
  }
}

/** What the audit event of a refused Express request records. */
export function failureContext(req: Request, requestId: string): FailureContext {
  return {
    requestId,
    clientAddress: req.ip ?? null,
    method: req.method,
    path: pathOf(req.originalUrl),
    authorization: readAuthHeaders(req.rawHeaders).authorization,
    principal: req.principal ?? null,
  }
}

/** Each request's `onFailure`, so that `requirePermission`'s 403s reach it too. */
const failureHooks = new WeakMap<Request, (req: Request, failure: AuthFailure) => void>()

/**
 * Route middleware: 403 unless `req.principal` holds every permission. Used without the
 * `tokengate()` middleware before it, it fails closed: the request reaches Express' error
 * handler (500) instead of the route.
 */
export function requirePermission(...permissions: string[]): RequestHandler {
  const required = Object.freeze([...permissions])
  return function requirePermissionMiddleware(req: Request, res: Response, next: NextFunction) {
    if (!req.principal) {
      return next(new Error('requirePermission: no principal; mount tokengate() before it'))
    }
    const failure = authorize(req.principal, required)
    if (!failure) return next()
    const requestId = ensureRequestId(req, res)
    failureHooks.get(req)?.(req, failure)
    auditors.get(req)?.(failure, failureContext(req, requestId))
    sendFailure(res, failure, requestId)
  }
}

/** Answers an `AuthFailure` with the project's single wire mapping (`failureResponse`). */
export function sendFailure(res: Response, failure: AuthFailure, requestId: string): void {
  const response = failureResponse(failure, requestId)
  // `end`, not `send`: no ETag or content negotiation on an error, exactly as the server.
  res.status(response.status).set(failureHeaders(response, requestId))
  res.end(JSON.stringify(response.body))
}

function ensureRequestId(req: Request, res: Response): string {
  const existing = res.getHeader('x-request-id')
  if (typeof existing === 'string') return existing
  const id = requestIdFrom(req.headers['x-request-id'])
  res.setHeader('x-request-id', id)
  return id
}
