/**
 * `tokengate/hono`: the auth core as Hono middleware.
 *
 * Only types are imported from Hono, so this module loads without it; `hono` is an optional
 * peer dependency.
 *
 * Raw headers: on `@hono/node-server` the Node request is reachable as `c.env.incoming`, and
 * its `rawHeaders` are read, exactly as the server does. On other runtimes (Bun, Deno,
 * workers) only the Fetch `Headers` exist, where duplicates are already joined with `", "`:
 * two `Authorization` headers are still refused (the joined value is not a valid bearer
 * token), and two `X-Tenant-Id` values still fail the exact comparison unless a tenant id
 * itself contains `", "`. See `authInputFromHeaders` for the details of that weaker guarantee.
 *
 * @example
 * import { Hono } from 'hono'
 * import { requirePermission, tokengate, type TokengateEnv } from 'tokengate/hono'
 * const app = new Hono<TokengateEnv>()
 * const gate = await createTokengate({ dataDir: '.tokengate' }) // from 'tokengate'
 * app.use('/api/v1/*', tokengate(gate))
 * app.get('/api/v1/projects', requirePermission('projects:read'), (c) =>
 *   c.json({ tenant: c.get('principal').tenantId }))
 */
import type { IncomingMessage } from 'node:http'
import type { Context, MiddlewareHandler } from 'hono'
import {
  type Gate,
  type GateRequest,
  type GateSource,
  gateFrom,
  type Refused,
} from '../auth/gate.ts'
import type { Principal } from '../core/principal.ts'
import { type AuthInput, authInputFromHeaders, readAuthHeaders } from '../core/raw-headers.ts'
import { failureHeaders } from '../http/node-response.ts'
import { peerCertificateOf } from '../http/peer-certificate.ts'
import { isPreflightOf, PREFLIGHT_ANSWER, type PreflightRule } from '../http/preflight.ts'
import { requestIdOf } from '../http/request-id.ts'

export type { Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { Principal } from '../core/principal.ts'

/** Context variables set by the middleware: `c.get('principal')`, `c.get('requestId')`. */
export interface TokengateVariables {
  principal: Principal
  requestId: string
  /** The gate and request that allowed the request (for `requirePermission`). */
  tokengateChecked: { readonly gate: Gate; readonly request: GateRequest } | undefined
}

/** The Hono `Env` to declare on the app: `new Hono<TokengateEnv>()`. */
export interface TokengateEnv {
  Variables: TokengateVariables
}

export type TokengateHonoOptions = GateSource & {
  /** A CORS preflight: answered 204 (default) or handed on unchecked (http/preflight.ts). */
  readonly preflight?: PreflightRule
}

/**
 * Checks each request with the gate and sets `principal` (and `requestId`) on the context;
 * a refusal is answered at once with the server's problem body and headers. Mount it on the
 * paths to protect: `app.use('/api/v1/*', tokengate(gate))`.
 */
export function tokengate(options: TokengateHonoOptions): MiddlewareHandler<TokengateEnv> {
  const gate = gateFrom(options)
  const preflight = options.preflight ?? 'answer'
  return async function tokengateMiddleware(c, next) {
    if (isPreflightOf(c.req.method, (name) => c.req.header(name))) {
      if (preflight === 'pass') return next()
      return new Response(null, PREFLIGHT_ANSWER)
    }
    const requestId = requestIdOf(c.req.header('x-request-id'))
    c.set('requestId', requestId)
    c.header('x-request-id', requestId)
    const request = gateRequestOf(c, requestId)
    const outcome = await gate.check(request)
    if (!outcome.allowed) return refusedResponse(outcome)
    c.set('principal', outcome.principal)
    c.set('tokengateChecked', { gate, request })
    for (const [name, value] of Object.entries(outcome.headers)) c.header(name, value)
    await next()
  }
}

/**
 * Route middleware: 403 unless the principal holds every permission, recorded by the gate
 * that allowed the request. Without `tokengate()` before it, it fails closed: it throws, and
 * Hono answers 500 instead of running the route.
 */
export function requirePermission(...permissions: string[]): MiddlewareHandler<TokengateEnv> {
  const required = Object.freeze([...permissions])
  return async function requirePermissionMiddleware(c, next) {
    const principal = c.get('principal') as Principal | undefined
    const allowed = c.get('tokengateChecked')
    if (!principal || !allowed) {
      throw new Error('requirePermission: no principal; mount tokengate() before it')
    }
    const refused = allowed.gate.authorize(allowed.request, principal, required)
    if (!refused) return next()
    return refusedResponse(refused)
  }
}

/** A refusal as a Fetch `Response`, exactly as the server answers it. */
export function refusedResponse(refused: Refused): Response {
  return new Response(JSON.stringify(refused.body), {
    status: refused.status,
    headers: failureHeaders(refused, refused.body.requestId),
  })
}

function gateRequestOf(c: Context, requestId: string): GateRequest {
  const incoming = (c.env as { incoming?: Partial<IncomingMessage> } | undefined)?.incoming
  const { authorization, tenantIds, headers } = authInputOf(incoming, c)
  const url = new URL(c.req.url)
  return {
    method: c.req.method,
    target: url.pathname + url.search,
    authorization,
    tenantIds,
    clientAddress: incoming?.socket?.remoteAddress ?? '',
    headers,
    peerCertificate: peerCertificateOf(incoming?.socket),
    requestId,
  }
}

/** Raw Node headers when running on `@hono/node-server`, otherwise the Fetch headers. */
function authInputOf(incoming: Partial<IncomingMessage> | undefined, c: Context): AuthInput {
  if (Array.isArray(incoming?.rawHeaders)) {
    return { ...readAuthHeaders(incoming.rawHeaders), headers: incoming.rawHeaders }
  }
  const headers = [...c.req.raw.headers].flat()
  return { ...authInputFromHeaders((name) => c.req.raw.headers.get(name)), headers }
}
