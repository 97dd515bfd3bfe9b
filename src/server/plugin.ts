import { Buffer } from 'node:buffer'
import { Readable } from 'node:stream'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { type AuthenticateMaybeSync, isPromiseLike, maybeSyncOf } from '../core/authenticate.ts'
import { authorize } from '../core/authorize.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { AuthResult, Principal } from '../core/principal.ts'
import { type AuthInput, readAuthHeaders } from '../core/raw-headers.ts'
import { API_PREFIX, pathOf } from '../http/api-path.ts'
import { failureResponse } from '../http/failure-response.ts'
import { formHasAccessToken, ONE_METHOD_FAILURE, queryHasAccessToken } from '../http/one-method.ts'
import { tokenDigestOf } from './request-state.ts'
import { sendResponse } from './send-response.ts'

/** The instance decoration this plugin calls right after a successful authentication. */
export const LIMIT_PRINCIPAL = Symbol('tokengate.limitPrincipal')
/** The instance decoration this plugin calls before every authentication. */
export const GATE_FAILED_AUTH = Symbol('tokengate.gateFailedAuth')
/** The instance decoration this plugin calls before answering a failed authentication (401). */
export const COUNT_FAILURE = Symbol('tokengate.countFailure')

type Step = (request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void) => void

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated caller; null outside the protected prefix. */
    principal: Principal | null
    /** The authentication failure, when one was answered (for logging). */
    authFailure: AuthFailure | null
  }
  interface FastifyInstance {
    /** Set by the rate-limit plugin: per-token then per-tenant limit of an authenticated request. */
    [LIMIT_PRINCIPAL]?: Step
    /** Set by the rate-limit plugin: calls `done` to go on, or answers 429 and does not. */
    [GATE_FAILED_AUTH]?: Step
    /** Set by the rate-limit plugin: counts a 401 against the client address. */
    [COUNT_FAILURE]?: Step
  }
  interface FastifyContextConfig {
    /** Permissions the route requires; all must be held (403 otherwise). */
    permissions?: readonly string[]
  }
}

export interface TokengatePluginOptions {
  /** `createAuthenticator` (a promise) or `createMaybeSyncAuthenticator` (a value when it can). */
  readonly authenticate: AuthenticateMaybeSync
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
  const prefix = options.prefix ?? `${API_PREFIX}/`
  const authenticate = maybeSyncOf(options.authenticate)
  const exact = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix

  fastify.decorateRequest('principal', null)
  fastify.decorateRequest('authFailure', null)

  // A 401 counts against the client address (the rate-limit plugin) before it is answered.
  const countFailure = fastify[COUNT_FAILURE]
  const answerFailure = (request: FastifyRequest, reply: FastifyReply, failure: AuthFailure) => {
    const response = failureResponse(failure, String(request.id))
    request.authFailure = failure
    options.onFailure?.(request, failure)
    if (!countFailure || response.status !== 401) return void sendResponse(reply, response)
    countFailure(request, reply, (error) =>
      error ? void reply.send(error) : void sendResponse(reply, response),
    )
  }

  const authenticated = (request: FastifyRequest, reply: FastifyReply, result: AuthResult) => {
    if (!result.ok) {
      answerFailure(request, reply, result.failure)
      return false
    }
    request.principal = result.principal
    options.onAuthenticated?.(request, result.principal)
    return true
  }

  // RFC 6750 §2: the token also sent as `access_token` (http/one-method.ts).
  const refuseOneMethod = (request: FastifyRequest, reply: FastifyReply) =>
    void sendFailure(request, reply, ONE_METHOD_FAILURE, options.onFailure)

  // The rate-limit plugin (registered before this one) limits the principal right after
  // authentication, in this same hook; without it, an authenticated request just continues.
  const limit = fastify[LIMIT_PRINCIPAL]
  const next: Step = limit ?? ((_request, _reply, done) => done())
  // Every call of authenticate below goes through the failed-authentication gate first.
  const gate: Step = fastify[GATE_FAILED_AUTH] ?? ((_request, _reply, done) => done())

  /**
   * gate → authenticate → `then` (or the failure answered). Callback style: `authenticate`
   * answers cache hits synchronously (a value, not a promise), and the request then goes on
   * without a promise hop; a store or JWKS round trip continues it when it completes. A step
   * that answered does not call `done`.
   */
  const gatedAuthenticate = (
    request: FastifyRequest,
    reply: FastifyReply,
    done: (error?: Error) => void,
    then: () => void,
  ) =>
    gate(request, reply, (gateError) => {
      if (gateError) return done(gateError)
      const result = authenticate(authInputOf(request))
      if (!isPromiseLike(result)) {
        if (authenticated(request, reply, result)) then()
        return
      }
      result.then((r) => {
        try {
          if (authenticated(request, reply, r)) then()
        } catch (error) {
          done(error as Error)
        }
      }, done)
    })

  fastify.addHook('onRequest', (request, reply, done) => {
    // A CORS preflight carries no credentials by design (Fetch standard): it is never
    // authenticated and never counts as a failure. One from an allowed origin was answered
    // by the CORS plugin already; any other gets an empty 204 without CORS headers, which
    // the browser reads as a refusal.
    if (isPreflight(request)) return void reply.code(204).header('content-length', '0').send()
    const path = pathOf(request.url)
    if (!path.startsWith(prefix) && path !== exact) return done()
    gatedAuthenticate(request, reply, done, () => {
      if (queryHasAccessToken(request.url)) return refuseOneMethod(request, reply)
      next(request, reply, done)
    })
  })

  // RFC 6750 §2: a token in the header and in a form field is refused too. The form body
  // is read (within the body limit) only for authenticated form requests, then handed on
  // unchanged as a stream, so the gateway still proxies it byte for byte.
  const bodyLimit = fastify.initialConfig.bodyLimit ?? 1_048_576
  fastify.addHook('preParsing', (request, reply, payload, done) => {
    if (!request.principal || !isForm(request.headers['content-type'])) {
      return done(null, payload)
    }
    readBounded(payload, bodyLimit).then((body) => {
      if (body === undefined) return done(bodyTooLarge())
      if (formHasAccessToken(body.toString('latin1'))) return refuseOneMethod(request, reply)
      done(null, Readable.from([body]))
    }, done)
  })

  fastify.addHook('preHandler', (request, reply, done) => {
    // A route declared under the prefix but reached through a URL that the prefix test above
    // did not match (an encoded segment, an absolute-form target) is authenticated here,
    // through the same gate, and then limited like any other.
    if (
      !request.principal &&
      !request.authFailure &&
      request.routeOptions.url?.startsWith(prefix)
    ) {
      return gatedAuthenticate(request, reply, done, () => {
        if (queryHasAccessToken(request.url)) return refuseOneMethod(request, reply)
        checkPermissions(request, reply, () => next(request, reply, done))
      })
    }
    checkPermissions(request, reply, done)
  })

  const checkPermissions = (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const required = request.routeOptions.config.permissions
    if (!required || required.length === 0 || !request.principal) return done()
    const failure = authorize(request.principal, required)
    if (failure) return void sendFailure(request, reply, failure, options.onFailure)
    done()
  }
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
  return sendResponse(reply, failureResponse(failure, String(request.id)))
}

function isPreflight(request: FastifyRequest): boolean {
  return (
    request.method === 'OPTIONS' &&
    request.headers.origin !== undefined &&
    request.headers['access-control-request-method'] !== undefined
  )
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

/**
 * rawHeaders, not request.headers: Node keeps only the first of two Authorization lines and
 * joins repeated X-Tenant-Id values, which would hide DESIGN rule 2 violations. The PAT hash
 * the rate limiter computed is handed on, so the token is hashed once per request.
 */
function authInputOf(request: FastifyRequest): AuthInput {
  const input = readAuthHeaders(request.raw.rawHeaders)
  const tokenSha256 = tokenDigestOf(request)
  if (tokenSha256 === undefined) return input
  return { authorization: input.authorization, tenantIds: input.tenantIds, tokenSha256 }
}

export const tokengatePlugin = fp(plugin, { fastify: '5.x', name: 'tokengate' })
export default tokengatePlugin
