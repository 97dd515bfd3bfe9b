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
import type { FailureContext } from '../auth/tokengate.ts'
import type { AuthenticateMaybeSync } from '../core/authenticate.ts'
import { authorize } from '../core/authorize.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { Principal } from '../core/principal.ts'
import { type AuthInput, authInputFromHeaders, readAuthHeaders } from '../core/raw-headers.ts'
import { failureResponse } from '../http/failure-response.ts'
import { ONE_METHOD_FAILURE, queryHasAccessToken } from '../http/one-method.ts'
import { failureHeaders, requestIdFrom } from './wire.ts'

export type { FailureContext, Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { Principal } from '../core/principal.ts'

/** Context variables set by the middleware: `c.get('principal')`, `c.get('requestId')`. */
export interface TokengateVariables {
  principal: Principal
  requestId: string
  /** The audit of the `tokengate()` that authenticated the request (for `requirePermission`). */
  tokengateRecordFailure: ((failure: AuthFailure, context: FailureContext) => void) | undefined
}

/** The Hono `Env` to declare on the app: `new Hono<TokengateEnv>()`. */
export interface TokengateEnv {
  Variables: TokengateVariables
}

export interface TokengateHonoOptions {
  /**
   * The authentication pipeline: `createTokengate(...).authenticate`, or your own
   * `createAuthenticator` / `createMaybeSyncAuthenticator`.
   */
  readonly authenticate: AuthenticateMaybeSync
  /** Called after a successful authentication. */
  readonly onAuthenticated?: (c: Context, principal: Principal) => void
  /** Called for every failure answered (401, 403, 503). */
  readonly onFailure?: (c: Context, failure: AuthFailure) => void
  /** Audits a refused request: `createTokengate`'s, passed along by `tokengate(gate)`. */
  readonly recordFailure?: (failure: AuthFailure, context: FailureContext) => void
}

/**
 * Authenticates each request and sets `principal` (and `requestId`) on the context; a
 * failure is answered at once with the server's problem body and headers. Mount it on the
 * paths to protect: `app.use('/api/v1/*', tokengate({ authenticate }))`.
 */
export function tokengate(options: TokengateHonoOptions): MiddlewareHandler<TokengateEnv> {
  const { authenticate } = options
  return async function tokengateMiddleware(c, next) {
    if (options.onFailure) failureHooks.set(c.req.raw, options.onFailure)
    const requestId = ensureRequestId(c)
    const refuse = (failure: AuthFailure) => {
      options.onFailure?.(c, failure)
      options.recordFailure?.(failure, failureContext(c, requestId))
      return failureAsResponse(failure, requestId)
    }
    const result = await authenticate(authInputOf(c))
    if (!result.ok) return refuse(result.failure)
    if (queryHasAccessToken(c.req.url)) return refuse(ONE_METHOD_FAILURE)
    c.set('principal', result.principal)
    c.set('tokengateRecordFailure', options.recordFailure)
    options.onAuthenticated?.(c, result.principal)
    await next()
  }
}

/** Each request's `onFailure`, so that `requirePermission`'s 403s reach it too. */
const failureHooks = new WeakMap<Request, (c: Context, failure: AuthFailure) => void>()

/**
 * Route middleware: 403 unless the principal holds every permission. Without `tokengate()`
 * before it, it fails closed: it throws, and Hono answers 500 instead of running the route.
 */
export function requirePermission(...permissions: string[]): MiddlewareHandler<TokengateEnv> {
  const required = Object.freeze([...permissions])
  return async function requirePermissionMiddleware(c, next) {
    const principal = c.get('principal') as Principal | undefined
    if (!principal) throw new Error('requirePermission: no principal; mount tokengate() before it')
    const failure = authorize(principal, required)
    if (!failure) return next()
    const requestId = ensureRequestId(c)
    failureHooks.get(c.req.raw)?.(c, failure)
    c.get('tokengateRecordFailure')?.(failure, failureContext(c, requestId))
    return failureAsResponse(failure, requestId)
  }
}

/** An `AuthFailure` as a Fetch `Response`, through the project's single wire mapping. */
export function failureAsResponse(failure: AuthFailure, requestId: string): Response {
  const response = failureResponse(failure, requestId)
  return new Response(JSON.stringify(response.body), {
    status: response.status,
    headers: failureHeaders(response, requestId),
  })
}

/** What the audit event of a refused Hono request records. */
function failureContext(c: Context, requestId: string): FailureContext {
  const incoming = (c.env as { incoming?: Partial<IncomingMessage> } | undefined)?.incoming
  return {
    requestId,
    clientAddress: incoming?.socket?.remoteAddress ?? null,
    method: c.req.method,
    path: c.req.path,
    authorization: authInputOf(c).authorization,
    principal: (c.get('principal') as Principal | undefined) ?? null,
  }
}

/** Raw Node headers when running on `@hono/node-server`, otherwise the Fetch headers. */
function authInputOf(c: Context): AuthInput {
  const incoming = (c.env as { incoming?: Partial<IncomingMessage> } | undefined)?.incoming
  if (Array.isArray(incoming?.rawHeaders)) return readAuthHeaders(incoming.rawHeaders)
  return authInputFromHeaders((name) => c.req.raw.headers.get(name))
}

function ensureRequestId(c: Context<TokengateEnv>): string {
  const existing = c.get('requestId') as string | undefined
  if (existing) return existing
  const id = requestIdFrom(c.req.header('x-request-id'))
  c.set('requestId', id)
  c.header('x-request-id', id)
  return id
}
