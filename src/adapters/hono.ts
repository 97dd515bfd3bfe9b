/**
 * `tokengate/hono`: the gate as Hono middleware; the edge (auth/edge.ts) decides, this only
 * translates. Types only from Hono (optional peer). On `@hono/node-server` the `rawHeaders`
 * are read (two `Authorization` lines are two); elsewhere the Fetch `Headers`, whose joined
 * duplicates fail the exact checks too. `app.use('/api/v1/*', tokengate(gate))`, then
 * `requirePermission('p:read')` on a route and `c.get('principal')` in it.
 */
import type { IncomingMessage } from 'node:http'
import type { Context, MiddlewareHandler } from 'hono'
import { createEdge, type Edge, type EdgeOptions, type FinishingResponse } from '../auth/edge.ts'
import { enterFetch, refusedResponse } from '../auth/edge-fetch.ts'
import type { GateRequest, GateSource } from '../auth/gate.ts'
import type { Principal } from '../core/principal.ts'

export type { Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { Principal } from '../core/principal.ts'

/** Context variables set by the middleware: `c.get('principal')`, `c.get('requestId')`. */
export interface TokengateVariables {
  principal: Principal
  requestId: string
  /** The edge and request that allowed the request (for `requirePermission`). */
  tokengateChecked: { readonly edge: Edge; readonly request: GateRequest } | undefined
}

/** The Hono `Env` to declare on the app: `new Hono<TokengateEnv>()`. */
export interface TokengateEnv {
  Variables: TokengateVariables
}

export type TokengateHonoOptions = GateSource & EdgeOptions

/** Checks each request and sets `principal` and `requestId`; a refusal is answered at once. */
export function tokengate(options: TokengateHonoOptions): MiddlewareHandler<TokengateEnv> {
  const edge = createEdge(options, options)
  return async function tokengateMiddleware(c, next) {
    const { incoming, outgoing } = nodeOf(c)
    const entry = await enterFetch(edge, inputOf(c, incoming), () => c.req.text(), outgoing)
    if (entry.response) return entry.response
    if (!entry.passed) return next()
    const { requestId, request, outcome } = entry.passed
    c.set('requestId', requestId)
    c.header('x-request-id', requestId)
    c.set('principal', outcome.principal)
    c.set('tokengateChecked', { edge, request })
    for (const [name, value] of Object.entries(outcome.headers)) c.header(name, value)
    // The app's handler in the request's span; a throw Hono does not answer itself (not an
    // Error) becomes the server's 500, and the span still ends.
    let status = 500
    try {
      await entry.run(next)
      status = c.res.status
    } finally {
      entry.answered(status)
    }
  }
}

/** Route middleware: 403 unless every permission is held; without `tokengate()`, a 500. */
export function requirePermission(...permissions: string[]): MiddlewareHandler<TokengateEnv> {
  const required = Object.freeze([...permissions])
  return async function requirePermissionMiddleware(c, next) {
    const principal = c.get('principal') as Principal | undefined
    const allowed = c.get('tokengateChecked')
    if (!principal || !allowed) {
      throw new Error('requirePermission: no principal; mount tokengate() before it')
    }
    const refused = allowed.edge.gate.authorize(allowed.request, principal, required)
    return refused ? refusedResponse(refused) : next()
  }
}

export { refusedResponse }

interface NodeEnv {
  readonly incoming?: Partial<IncomingMessage> | undefined
  readonly outgoing?: FinishingResponse | undefined
}

/**
 * The Node request and response under the Fetch ones, on `@hono/node-server` (elsewhere
 * `c.env` holds the runtime's bindings: no response there).
 */
function nodeOf(c: Context): NodeEnv {
  const env = c.env as NodeEnv | undefined
  const outgoing = env?.outgoing
  return {
    incoming: env?.incoming,
    outgoing: typeof outgoing?.once === 'function' ? outgoing : undefined,
  }
}

function inputOf(c: Context, incoming: Partial<IncomingMessage> | undefined) {
  const raw = incoming?.rawHeaders
  const url = new URL(c.req.url)
  return {
    method: c.req.method,
    target: url.pathname + url.search,
    rawHeaders: Array.isArray(raw) ? raw : [...c.req.raw.headers].flat(),
    clientAddress: incoming?.socket?.remoteAddress ?? '',
    socket: incoming?.socket,
  }
}
