/**
 * `tokengate/fastify`: the gate as a Fastify 5 plugin, used by applications and by tokengate's
 * own server. Every request under the prefix goes through `gate.check` in `onRequest`
 * (routing has already matched it, so the route's `config.permissions` are known): an unknown
 * path there is 401 without a valid token and 404 with one, so anonymous callers learn
 * nothing about the routes.
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
import { Buffer } from 'node:buffer'
import { Readable } from 'node:stream'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import {
  type Access,
  type Gate,
  type GateRequest,
  type GateSource,
  gateFrom,
  type Outcome,
  type Refused,
} from '../auth/gate.ts'
import type { Answer } from '../auth/outcome-recorder.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { Principal } from '../core/principal.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { API_PREFIX, pathOf } from '../http/api-path.ts'
import { formHasAccessToken, ONE_METHOD_FAILURE } from '../http/one-method.ts'
import { peerCertificateOf } from '../http/peer-certificate.ts'
import { isPreflightOf, PREFLIGHT_ANSWER, type PreflightRule } from '../http/preflight.ts'
import { sendProblemResponse } from '../http/problem-response.ts'
import { requestIdOf } from '../http/request-id.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'

export type { Tokengate } from '../auth/tokengate.ts'
export type { Authenticate, AuthenticateMaybeSync } from '../core/authenticate.ts'
export type { AuthFailure } from '../core/failure.ts'
export type { Principal } from '../core/principal.ts'

/** The instance decoration holding the plugin's gate, for handlers' later refusals. */
const GATE = Symbol('tokengate.gate')

declare module 'fastify' {
  interface FastifyInstance {
    [GATE]?: Gate
  }
  interface FastifyRequest {
    /** The authenticated caller; null outside the protected prefix. */
    principal: Principal | null
    /** The refusal's failure, when one was answered. */
    authFailure: AuthFailure | null
    /** The gate's outcome for this request; null outside the protected prefix. */
    outcome: Outcome | null
  }
  interface FastifyContextConfig {
    /** Permissions the route requires; all must be held (403 otherwise). */
    permissions?: readonly string[]
    /** What the route requires, when it is not a list of permissions (the gateway's policy). */
    access?: Access
  }
}

export type TokengateFastifyOptions = GateSource & {
  /** Requests whose path starts with this are checked. Default `/api/v1/`. */
  readonly prefix?: string
  /** Take the request id from `X-Request-Id` (the one rule) and echo it. Default true. */
  readonly requestIds?: boolean
  /** A CORS preflight under the prefix: answered 204 (default) or handed on (http/preflight.ts). */
  readonly preflight?: PreflightRule
  /** Reports every answer under the prefix (the server's metrics and request log). */
  readonly recordAnswer?: ((answer: Answer) => void) | undefined
}

const plugin: FastifyPluginAsync<TokengateFastifyOptions> = async (fastify, options) => {
  const gate = gateFrom(options)
  const prefix = options.prefix ?? `${API_PREFIX}/`
  const exact = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix
  const accessOf = routeAccess()
  const preflight = options.preflight ?? 'answer'

  fastify.decorateRequest('principal', null)
  fastify.decorateRequest('authFailure', null)
  fastify.decorateRequest('outcome', null)

  if (options.requestIds !== false) {
    fastify.addHook('onRequest', (request, reply, done) => {
      request.id = requestIdOf(request.headers['x-request-id'])
      reply.header('x-request-id', request.id)
      done()
    })
  }

  fastify.addHook('onRequest', (request, reply, done) => {
    const path = pathOf(request.url)
    const protectedPath =
      path.startsWith(prefix) || path === exact || request.routeOptions.url?.startsWith(prefix)
    if (!protectedPath) return done()
    // The one preflight rule (http/preflight.ts); one from an allowed origin was answered by
    // the server's CORS plugin already.
    if (isPreflightOf(request.method, (name) => request.headers[name])) {
      if (preflight === 'pass') return done()
      return void reply.code(PREFLIGHT_ANSWER.status).headers(PREFLIGHT_ANSWER.headers).send()
    }
    const outcome = gate.check(gateRequestOf(request, accessOf(request)))
    if (!isPromiseLike(outcome)) return void apply(request, reply, outcome, done)
    outcome.then((settled) => apply(request, reply, settled, done), done)
  })

  // RFC 6750 §2: a token in the header and in a form field is refused too. The form body is
  // read (within the body limit) only for allowed form requests, then handed on unchanged
  // as a stream, so the gateway still proxies it byte for byte.
  const bodyLimit = fastify.initialConfig.bodyLimit ?? 1_048_576
  fastify.addHook('preParsing', (request, reply, payload, done) => {
    if (!request.principal || !isForm(request.headers['content-type'])) return done(null, payload)
    readBounded(payload, bodyLimit).then((body) => {
      if (body === undefined) return done(bodyTooLarge())
      if (!formHasAccessToken(body.toString('latin1'))) return done(null, Readable.from([body]))
      const refused = gate.refuse(
        gateRequestOf(request, undefined),
        ONE_METHOD_FAILURE,
        request.principal,
      )
      sendRefused(request, reply, refused)
    }, done)
  })

  const { recordAnswer } = options
  if (recordAnswer) {
    fastify.addHook('onResponse', (request, reply, done) => {
      if (request.outcome !== null || request.url.startsWith(prefix)) {
        recordAnswer({
          listener: 'api',
          method: request.method,
          target: request.url,
          requestId: String(request.id),
          status: reply.statusCode,
          durationMs: reply.elapsedTime,
          outcome: request.outcome ?? undefined,
        })
      }
      done()
    })
  }

  fastify.decorate(GATE, gate)
}

function apply(
  request: FastifyRequest,
  reply: FastifyReply,
  outcome: Outcome,
  done: (error?: Error) => void,
): void {
  request.outcome = outcome
  if (!outcome.allowed) return void sendRefused(request, reply, outcome)
  request.principal = outcome.principal
  if (outcome.headers !== undefined) reply.headers(outcome.headers)
  done()
}

/** Answers a refusal (the gate's, or one a handler got from `refuse` / `authorize`). */
export function sendRefused(
  request: FastifyRequest,
  reply: FastifyReply,
  refused: Refused,
): FastifyReply {
  request.outcome = refused
  request.authFailure = refused.failure
  return sendProblemResponse(reply, refused)
}

export { sendProblemResponse }

/**
 * A later refusal from a route handler (a permission that depends on the request's
 * parameters), recorded through the gate like its own.
 */
export function refuse(
  request: FastifyRequest,
  reply: FastifyReply,
  failure: AuthFailure,
): FastifyReply {
  const gate = request.server[GATE] as Gate
  return sendRefused(
    request,
    reply,
    gate.refuse(gateRequestOf(request, undefined), failure, request.principal),
  )
}

/**
 * rawHeaders, not request.headers: Node keeps only the first of two Authorization lines and
 * joins repeated X-Tenant-Id values, which would hide DESIGN rule 2 violations.
 */
function gateRequestOf(request: FastifyRequest, access: Access | undefined): GateRequest {
  const { authorization, tenantIds } = readAuthHeaders(request.raw.rawHeaders)
  return {
    method: request.method,
    target: request.url,
    authorization,
    tenantIds,
    clientAddress: request.ip,
    headers: request.raw.rawHeaders,
    peerCertificate: peerCertificateOf(request.raw.socket),
    requestId: String(request.id),
    access,
  }
}

/** The route's access, built once per route config: its policy, or its permissions. */
function routeAccess(): (request: FastifyRequest) => Access | undefined {
  const built = new WeakMap<object, Access | undefined>()
  return (request) => {
    const config = request.routeOptions.config
    if (built.has(config)) return built.get(config)
    const access =
      config.access ??
      (config.permissions?.length ? { permissions: config.permissions } : undefined)
    built.set(config, access)
    return access
  }
}

function isForm(contentType: string | undefined): boolean {
  return (
    contentType?.trimStart().toLowerCase().startsWith('application/x-www-form-urlencoded') === true
  )
}

/** The whole body, or undefined once it exceeds `limit` bytes. */
async function readBounded(payload: Readable, limit: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of payload) {
    size += (chunk as Buffer).length
    if (size > limit) return undefined
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks)
}

function bodyTooLarge(): Error {
  return Object.assign(new Error('Request body is too large'), {
    code: 'FST_ERR_CTP_BODY_TOO_LARGE',
    statusCode: 413,
  })
}

/** Register with `app.register(tokengate, gate)` or `app.register(tokengate, { authenticate })`. */
export const tokengate = fp(plugin, { fastify: '5.x', name: 'tokengate' })
export default tokengate
