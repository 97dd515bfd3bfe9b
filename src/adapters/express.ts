/**
 * `tokengate/express`: the gate as Express 5 middleware; the edge (auth/edge.ts) decides,
 * this only translates. Types only from Express: it loads without it (optional peer).
 *
 * @example
 * app.use('/api/v1', tokengate(await createTokengate({ dataDir: '.tokengate' })))
 * app.get('/api/v1/p', requirePermission('p:read'), (req, res) => res.json(req.principal))
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express'
import { createEdge, type Edge, type EdgeOptions } from '../auth/edge.ts'
import { enterNode } from '../auth/edge-node.ts'
import type { GateRequest, GateSource, Refused } from '../auth/gate.ts'
import type { Principal } from '../core/principal.ts'
import { failureHeaders } from '../http/node-response.ts'

export type { Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { Principal } from '../core/principal.ts'

declare global {
  namespace Express {
    /** The authenticated caller, set by `tokengate()` (also as `res.locals.principal`). */
    interface Request {
      principal?: Principal
    }
    interface Locals {
      principal?: Principal
    }
  }
}

/** `prefix` (checked against `req.originalUrl`) and `preflight`: the edge's (auth/edge.ts). */
export type TokengateExpressOptions = GateSource & EdgeOptions

/** The edge and request a `tokengate()` allowed, for `requirePermission`'s later check. */
const checked = new WeakMap<Request, { edge: Edge; request: GateRequest }>()

/** Checks each request and sets `req.principal`; a refusal is answered at once. */
export function tokengate(options: TokengateExpressOptions): RequestHandler {
  const edge = createEdge(options, options)
  return function tokengateMiddleware(req: Request, res: Response, next: NextFunction) {
    const clientAddress = req.ip ?? req.socket.remoteAddress ?? ''
    const node = { req, res, clientAddress, target: req.originalUrl }
    enterNode(edge, node, {
      pass: () => next(),
      failed: next,
      allowed({ request, outcome }) {
        req.principal = outcome.principal
        res.locals.principal = outcome.principal
        checked.set(req, { edge, request })
        next()
      },
    })
  }
}

/** Route middleware: 403 unless every permission is held; without `tokengate()`, a 500. */
export function requirePermission(...permissions: string[]): RequestHandler {
  const required = Object.freeze([...permissions])
  return function requirePermissionMiddleware(req: Request, res: Response, next: NextFunction) {
    const allowed = checked.get(req)
    if (!allowed || !req.principal) {
      return next(new Error('requirePermission: no principal; mount tokengate() before it'))
    }
    const refused = allowed.edge.gate.authorize(allowed.request, req.principal, required)
    if (!refused) return next()
    sendRefused(res, refused)
  }
}

/** Answers a refusal exactly as the server does (no ETag, no content negotiation). */
export function sendRefused(res: Response, refused: Refused): void {
  res.status(refused.status).set(failureHeaders(refused, refused.body.requestId))
  res.end(JSON.stringify(refused.body))
}
