/**
 * `tokengate/node-http`: the gate for a `node:http` / `node:https` server; the edge
 * (auth/edge.ts) decides, this only translates. Example, with `createTokengate`'s gate:
 * `createServer(tokengate(gate, { prefix: '/api/v1/' }, (req, res, who) => res.end()))`
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { createEdge, type Edge, type EdgeOptions, requestIdFor } from '../auth/edge.ts'
import { enterNode } from '../auth/edge-node.ts'
import type { GateSource, Outcome, Refused } from '../auth/gate.ts'
import type { Principal } from '../core/principal.ts'
import { sendFailureResponse } from '../http/node-response.ts'
import { isPreflightOf } from '../http/preflight.ts'
import type { MaybePromise } from '../lib/maybe-async.ts'

export type { Allowed, Outcome, Refused } from '../auth/gate.ts'
export type { Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { AuthResult, Principal } from '../core/principal.ts'

type NodeOptions = EdgeOptions & { readonly permissions?: readonly string[] | undefined }
type Handler = (req: IncomingMessage, res: ServerResponse, principal: Principal | null) => void

/**
 * A request listener: the edge's preflight rule, check (`permissions` all held) and form-body
 * check, then `handler` with the caller (null outside `prefix`, or a handed-on preflight).
 */
export function tokengate(source: GateSource, options: NodeOptions, handler: Handler) {
  const edge = createEdge(source, options)
  const access = options.permissions && { permissions: options.permissions }
  return (req: IncomingMessage, res: ServerResponse): void => {
    const clientAddress = req.socket.remoteAddress ?? ''
    const node = { req, res, clientAddress, target: req.url ?? '/', access }
    enterNode(edge, node, {
      pass: () => handler(req, res, null),
      allowed: ({ outcome }) => handler(req, res, outcome.principal),
      failed: () => res.destroy(),
    })
  }
}

export interface CheckOptions {
  /** The request's id (`requestIdOf(req)`), echoed in a refusal. */
  readonly requestId: string
  /** Permissions the route requires; all must be held (403 otherwise). */
  readonly permissions?: readonly string[]
}

const edges = new WeakMap<object, Edge>() // one per gate given to checkRequest

/** Checks one request with the gate (no preflight rule, no body read); `await` takes either. */
export function checkRequest(
  req: Pick<IncomingMessage, 'rawHeaders' | 'method' | 'url' | 'socket'>,
  source: GateSource,
  options: CheckOptions,
): MaybePromise<Outcome> {
  const edge = edges.get(source) ?? createEdge(source)
  edges.set(source, edge)
  const access = options.permissions ? { permissions: options.permissions } : undefined
  const { method = 'GET', url: target = '/', rawHeaders, socket } = req
  const input = { method, target, rawHeaders, socket, access }
  const clientAddress = socket.remoteAddress ?? ''
  return edge.gate.check(edge.gateRequestOf({ ...input, clientAddress }, options.requestId))
}

/** Whether a request is a CORS preflight, which is never checked (http/preflight.ts). */
export function isPreflightRequest(req: Pick<IncomingMessage, 'method' | 'headers'>): boolean {
  return isPreflightOf(req.method, (name) => req.headers[name])
}

/** The request's id: a safe incoming `X-Request-Id` (the one rule), or a new one. */
export function requestIdOf(req: Pick<IncomingMessage, 'headers'>): string {
  return requestIdFor(req.headers['x-request-id'])
}

/** Answers a refusal with the server's problem body and headers; not once the response began. */
export function sendRefused(res: ServerResponse, refused: Refused): void {
  sendFailureResponse(res, refused, refused.body.requestId)
}
