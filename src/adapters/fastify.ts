/**
 * `tokengate/fastify`: the gate as a Fastify 5 plugin; the edge (auth/edge.ts) decides, and
 * its Fastify hooks (auth/edge-fastify.ts) are the ones tokengate's own server registers.
 *
 * @example
 * await app.register(tokengate, await createTokengate({ dataDir: '.tokengate' }))
 * app.get('/api/v1/things', { config: { permissions: ['things:read'] } }, (request) => ({
 *   tenant: request.principal?.tenantId,
 * }))
 */
import type { FastifyPluginAsync } from 'fastify'
import fp from 'fastify-plugin'
import { createEdge, type PreflightRule } from '../auth/edge.ts'
import { refuse, registerEdgeHooks, sendRefused } from '../auth/edge-fastify.ts'
import { type GateSource, gateFrom } from '../auth/gate.ts'
import type { Answer } from '../auth/outcome-recorder.ts'
import { API_PREFIX } from '../http/api-path.ts'
import { sendProblemResponse } from '../http/problem-response.ts'

export type { Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { Principal } from '../core/principal.ts'

export type TokengateFastifyOptions = GateSource & {
  /** Requests whose path starts with this are checked. Default `/api/v1/`. */
  readonly prefix?: string
  /** Take the request id from `X-Request-Id` (the one rule) and echo it. Default true. */
  readonly requestIds?: boolean
  /** A CORS preflight under the prefix: answered 204 (default) or handed on (http/preflight.ts). */
  readonly preflight?: PreflightRule
  /**
   * Reports every answer under the prefix. Default: the gate's recorder, when it wants
   * answers (`createTokengate`'s does not).
   */
  readonly recordAnswer?: ((answer: Answer) => void) | undefined
}

const plugin: FastifyPluginAsync<TokengateFastifyOptions> = async (fastify, options) => {
  const prefix = options.prefix ?? `${API_PREFIX}/`
  const gate = gateFrom(options)
  const { recordAnswer = gate.recordAnswer } = options
  const edge = createEdge({ ...gate, recordAnswer }, { prefix, preflight: options.preflight })
  registerEdgeHooks(fastify, edge, { prefix, idsDecided: options.requestIds === false })
}

export { refuse, sendProblemResponse, sendRefused }

/** Register with `app.register(tokengate, gate)` or `app.register(tokengate, { authenticate })`. */
export const tokengate = fp(plugin, { fastify: '5.x', name: 'tokengate' })
export default tokengate
