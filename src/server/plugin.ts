import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Authenticate } from '../core/authenticate.ts'
import { authorize } from '../core/authorize.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { Principal } from '../core/principal.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { failureResponse } from '../http/failure-response.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated caller; null outside the protected prefix. */
    principal: Principal | null
    /** The authentication failure, when one was answered (for logging). */
    authFailure: AuthFailure | null
  }
  interface FastifyContextConfig {
    /** Permissions the route requires; all must be held (403 otherwise). */
    permissions?: readonly string[]
  }
}

export interface TokengatePluginOptions {
  readonly authenticate: Authenticate
  /** Requests whose path starts with this are authenticated before routing. Default `/api/v1/`. */
  readonly prefix?: string
  /** Called after a successful authentication (last-used tracking, metrics). */
  readonly onAuthenticated?: (request: FastifyRequest, principal: Principal) => void
  /** Called for every failure answered, 401, 403 or 503 (audit, metrics). */
  readonly onFailure?: (request: FastifyRequest, failure: AuthFailure) => void
}

/**
 * The auth core as a Fastify plugin. Authentication runs in `onRequest`, before routing
 * decisions matter, for every path under the prefix, including unknown ones: without a valid
 * token an unknown path is 401, with one it is 404 (DESIGN rule 8), so the route table never
 * leaks to anonymous callers. The permission rule runs in `preHandler` from the route's
 * `config.permissions`, so 401 is always decided before 403.
 */
const plugin: FastifyPluginAsync<TokengatePluginOptions> = async (fastify, options) => {
  const prefix = options.prefix ?? '/api/v1/'
  const exact = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix

  fastify.decorateRequest('principal', null)
  fastify.decorateRequest('authFailure', null)

  fastify.addHook('onRequest', async (request, reply) => {
    const path = pathOf(request.url)
    if (!path.startsWith(prefix) && path !== exact) return
    // rawHeaders, not request.headers: Node keeps only the first of two Authorization lines
    // and joins repeated X-Tenant-Id values, which would hide DESIGN rule 2 violations.
    const result = await options.authenticate(readAuthHeaders(request.raw.rawHeaders))
    if (!result.ok) return sendFailure(request, reply, result.failure, options.onFailure)
    request.principal = result.principal
    options.onAuthenticated?.(request, result.principal)
  })

  fastify.addHook('preHandler', async (request, reply) => {
    // Defence in depth: a route declared under the prefix but reached through a URL that the
    // prefix test above did not match (e.g. an encoding quirk) is authenticated here.
    if (!request.principal && request.routeOptions.url?.startsWith(prefix)) {
      const result = await options.authenticate(readAuthHeaders(request.raw.rawHeaders))
      if (!result.ok) return sendFailure(request, reply, result.failure, options.onFailure)
      request.principal = result.principal
    }
    const required = request.routeOptions.config.permissions
    if (!required || required.length === 0 || !request.principal) return
    const failure = authorize(request.principal, required)
    if (failure) return sendFailure(request, reply, failure, options.onFailure)
  })
}

/** Answers a failure with the core's single wire mapping; exported for route-level checks. */
export function sendFailure(
  request: FastifyRequest,
  reply: FastifyReply,
  failure: AuthFailure,
  onFailure?: (request: FastifyRequest, failure: AuthFailure) => void,
): FastifyReply {
  request.authFailure = failure
  onFailure?.(request, failure)
  const response = failureResponse(failure, String(request.id))
  return reply
    .code(response.status)
    .headers(response.headers)
    .type('application/problem+json')
    .send(response.body)
}

function pathOf(url: string): string {
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}

export const tokengatePlugin = fp(plugin, { fastify: '5.x', name: 'tokengate' })
export default tokengatePlugin
