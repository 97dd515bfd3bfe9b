/**
 * `tokengate/fastify`: the server's own Fastify plugin, with what an application needs
 * around it: the caller's `X-Request-Id` kept (when safe) and sent back on every answer, as
 * the Express and Hono adapters do, and refused requests audited through `createTokengate`.
 *
 * @example
 * import Fastify from 'fastify'
 * import { createTokengate } from 'tokengate'
 * import { tokengate } from 'tokengate/fastify'
 * const gate = await createTokengate({ dataDir: '.tokengate' })
 * const app = Fastify()
 * await app.register(tokengate, gate)
 * app.get('/api/v1/things', { config: { permissions: ['things:read'] } }, (request) => ({
 *   tenant: request.principal?.tenantId,
 * }))
 */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { FailureContext } from '../auth/tokengate.ts'
import type { AuthenticateMaybeSync } from '../core/authenticate.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { Principal } from '../core/principal.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { tokengatePlugin } from '../server/plugin.ts'
import { requestIdFrom } from './wire.ts'

export type { FailureContext, Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { Principal } from '../core/principal.ts'
export { sendFailure } from '../server/plugin.ts'

export interface TokengateFastifyOptions {
  /**
   * The authentication pipeline: `createTokengate(...).authenticate`, or your own
   * `createAuthenticator` / `createMaybeSyncAuthenticator`.
   */
  readonly authenticate: AuthenticateMaybeSync
  /** Requests whose path starts with this are authenticated before routing. Default `/api/v1/`. */
  readonly prefix?: string
  /** Called after a successful authentication. */
  readonly onAuthenticated?: (request: FastifyRequest, principal: Principal) => void
  /** Called for every failure answered (401, 403, 503). */
  readonly onFailure?: (request: FastifyRequest, failure: AuthFailure) => void
  /** Audits a refused request: `createTokengate`'s, passed along by `register(tokengate, gate)`. */
  readonly recordFailure?: (failure: AuthFailure, context: FailureContext) => void
}

const plugin: FastifyPluginAsync<TokengateFastifyOptions> = async (fastify, options) => {
  // Before the auth hook, so that a refusal already carries the caller's id.
  fastify.addHook('onRequest', (request, reply, done) => {
    const id = requestIdFrom(request.headers['x-request-id'])
    request.id = id
    reply.header('x-request-id', id)
    done()
  })
  const { recordFailure, onFailure } = options
  await fastify.register(tokengatePlugin, {
    authenticate: options.authenticate,
    ...(options.prefix !== undefined ? { prefix: options.prefix } : {}),
    ...(options.onAuthenticated ? { onAuthenticated: options.onAuthenticated } : {}),
    onFailure(request, failure) {
      onFailure?.(request, failure)
      recordFailure?.(failure, {
        requestId: String(request.id),
        clientAddress: request.ip,
        method: request.method,
        path: request.url.split('?', 1)[0],
        authorization: readAuthHeaders(request.raw.rawHeaders).authorization,
        principal: request.principal,
      })
    },
  })
}

/** Register with `app.register(tokengate, gate)` or `app.register(tokengate, { authenticate })`. */
export const tokengate = fp(plugin, { fastify: '5.x', name: 'tokengate-app' })
export default tokengate
