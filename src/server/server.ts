import type * as Http from 'node:http'
import type * as Https from 'node:https'
import { createRequire } from 'node:module'
import Fastify, {
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify'
import type { Logger } from 'pino'
import type { AuthContext } from '../auth/auth-context.ts'
import { createReuseDetector, type ReuseDetector } from '../auth/reuse-detector.ts'
import type { Config } from '../config/schema.ts'
import { parseAuthorization } from '../core/credentials.ts'
import type { AuthFailure } from '../core/failure.ts'
import { fingerprintToken } from '../core/fingerprint.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { problem } from '../http/problem.ts'
import { registerHealthRoutes } from './health.ts'
import type { Metrics } from './metrics.ts'
import { tokengatePlugin } from './plugin.ts'
import { rateLimitPlugin } from './rate-limit.ts'
import { createRequestIdGenerator, lazyChildLogger } from './request-logger.ts'
import { RequestFieldError } from './routes/pagination.ts'
import { StoreUnavailableError } from './routes/route.ts'
import { serializerSchema } from './routes/serializer-schema.ts'
import { v1Routes } from './routes/v1/index.ts'
import { type TlsMaterial, tlsServerOptions } from './tls.ts'
import { tokenDigestOf } from './token-digest.ts'

export interface BuildServerOptions {
  readonly config: Readonly<Config>
  readonly auth: AuthContext
  readonly logger: Logger
  /** HTTPS material; omitted only for the explicit plain-HTTP listener. */
  readonly tls?: TlsMaterial | undefined
  /** Prometheus metrics to record into (served on their own listener, see metrics.ts). */
  readonly metrics?: Metrics | undefined
  /**
   * Mounted after the built-in routes (the gateway's catch-all proxy): the composition root
   * wires them in, so the server never imports the gateway.
   */
  readonly mounts?: readonly ((app: FastifyInstance) => Promise<void>)[] | undefined
}

// Why require and not `import http from 'node:http'`: to build an ES module namespace for a
// built-in, Node reads every export, which loads its bundled undici: ~30 ms of start-up
// (measured) that this server never uses.
const require = createRequire(import.meta.url)
const http = require('node:http') as typeof Http
const https = require('node:https') as typeof Https

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/**
 * Builds the Fastify app without listening (tests use `inject` or listen on 127.0.0.1:0).
 * HTTPS unless `tls` is omitted; request ids on every response; HSTS over HTTPS; every
 * error as problem+json; per-request log lines carry a token fingerprint, never a token.
 */
export async function buildServer(options: BuildServerOptions): Promise<FastifyInstance> {
  const { config, auth, logger, tls, metrics } = options
  const serverOptions = {
    maxHeaderSize: config.server.maxHeaderBytes,
    requestTimeout: config.server.requestTimeoutMs,
  }
  const nextRequestId = createRequestIdGenerator()
  // One instance type for both listeners: handlers never depend on which one it is.
  const app = Fastify({
    loggerInstance: logger,
    // One log line per request is written by our onResponse hook, with the token fingerprint.
    logController: new LogController({ disableRequestLogging: true }),
    // request.log becomes a pino child only if the request logs something (request-logger.ts).
    childLoggerFactory: lazyChildLogger,
    bodyLimit: config.server.bodyLimitBytes,
    // The route schemas are ours and fixed (their tests and the OpenAPI test cover them), so
    // Ajv need not compile the draft-07 meta-schema to check them at every start (~30 ms).
    ajv: { customOptions: { validateSchema: false } },
    trustProxy: config.server.trustProxy,
    requestIdHeader: false,
    genReqId: (req) => {
      const incoming = req.headers['x-request-id']
      return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : nextRequestId()
    },
    serverFactory: (handler) =>
      tls
        ? https.createServer({ ...serverOptions, ...tlsServerOptions(tls) }, handler)
        : http.createServer(serverOptions, handler),
  }) as unknown as FastifyInstance

  const hsts =
    tls && config.server.hstsMaxAgeSec > 0 ? `max-age=${config.server.hstsMaxAgeSec}` : undefined
  // Callback-style hooks here and below: a hook with no asynchronous work costs no promise.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    if (hsts) reply.header('strict-transport-security', hsts)
    done()
  })

  // Before the auth plugin: the failed-authentication limit is checked ahead of verification.
  await app.register(rateLimitPlugin, { config: config.rateLimit, redisUrl: config.redisUrl })
  // Reuse of a rotated-out PAT revokes its rotation family (auth/reuse-detector.ts).
  const reuse = createReuseDetector({
    store: auth.store,
    audit: auth.audit,
    clock: auth.clock,
    log: logger,
  })
  app.addHook('onClose', () => reuse.settled())
  metrics?.instrument(app)
  const onFailure = (request: FastifyRequest, failure: AuthFailure) =>
    recordFailure(auth, request, failure, reuse)
  await app.register(tokengatePlugin, {
    authenticate: metrics ? metrics.timeAuthenticate(auth.authenticate) : auth.authenticate,
    onAuthenticated: (_request, principal) => {
      if (principal.tokenType === 'pat' && principal.tokenId) {
        auth.patUse.record(principal.tokenId, auth.clock.now())
      }
    },
    onFailure,
  })

  app.addHook('onResponse', (request, reply, done) => {
    // At `warn` (the benchmark, quiet deployments) the line is not even assembled.
    if (logger.isLevelEnabled('info')) logRequest(request, reply)
    done()
  })

  const context = { auth, config, onFailure }
  for (const route of v1Routes) {
    app.route({
      method: route.method,
      url: `/api/v1${route.path}`,
      // The OpenAPI document shows route.schema as written; the serializer gets an
      // equivalent schema it can apply without running the validator (serializer-schema.ts).
      schema: { ...route.schema, response: serializerSchemas(route.schema.response) },
      config: { permissions: route.permissions },
      handler: route.handler(context),
    })
  }
  registerHealthRoutes(app, auth)
  for (const mount of options.mounts ?? []) await mount(app)

  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem(404, 'not_found', 'No such endpoint.', String(request.id))),
  )
  app.setErrorHandler((error: FastifyError, request, reply) => handleError(error, request, reply))
  return app
}

function serializerSchemas(response: Readonly<Record<number, object>>): Record<number, object> {
  return Object.fromEntries(
    Object.entries(response).map(([status, schema]) => [status, serializerSchema(schema)]),
  )
}

/** The one line per request, at `info`: a token fingerprint, never a token. */
export function logRequest(request: FastifyRequest, reply: FastifyReply): void {
  request.log.info(
    {
      method: request.method,
      path: request.url.split('?', 1)[0],
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime * 100) / 100,
      auth: request.principal?.fingerprint,
      tenant: request.principal?.tenantId,
      code: request.authFailure?.code,
    },
    'request',
  )
}

export function recordFailure(
  auth: AuthContext,
  request: FastifyRequest,
  failure: AuthFailure,
  reuse: ReuseDetector,
): void {
  if (failure.code === 'unavailable') return
  // A 403's caller is authenticated, and its principal carries the verified fingerprint;
  // only a 401 has to fingerprint the raw credential (decoding a JWT's claims again).
  const actor = request.principal?.fingerprint ?? rawCredentialFingerprint(request)
  const requestId = String(request.id)
  auth.audit.write({
    type: failure.code === 'insufficient_permission' ? 'auth.forbidden' : 'auth.failed',
    tenantId: request.principal?.tenantId ?? null,
    actor,
    outcome: failure.code,
    clientAddress: request.ip,
    requestId,
    details: {
      method: request.method,
      path: request.url.split('?', 1)[0],
      ...(failure.code === 'invalid_token' ? { reason: failure.reason } : {}),
    },
  })
  reuse.onFailure(failure, { actor, clientAddress: request.ip, requestId })
}

function rawCredentialFingerprint(request: FastifyRequest): string | null {
  const parsed = parseAuthorization(readAuthHeaders(request.raw.rawHeaders).authorization)
  if (!parsed.ok) return null
  const digest = tokenDigestOf(request)
  return fingerprintToken(
    parsed.token,
    digest?.token === parsed.token ? digest.sha256Hex : undefined,
  )
}

function handleError(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const id = String(request.id)
  if (error.validation) {
    const errors = error.validation.map((v) => ({
      field: `${error.validationContext ?? 'request'}${v.instancePath || ''}`,
      message: v.message ?? 'invalid',
    }))
    const first = errors[0]
    const detail = first ? `${first.field}: ${first.message}` : 'Invalid request.'
    return sendProblem(reply, problem(400, 'validation_failed', detail, id, { errors }))
  }
  if (error instanceof RequestFieldError) {
    const detail = `${error.field}: ${error.message}`
    return sendProblem(
      reply,
      problem(400, 'validation_failed', detail, id, {
        errors: [{ field: error.field, message: error.message }],
      }),
    )
  }
  if (error instanceof StoreUnavailableError) {
    request.log.warn({ err: error.cause }, 'store unavailable')
    reply.header('retry-after', '5')
    return sendProblem(reply, problem(503, 'unavailable', 'The store is not reachable.', id))
  }
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    const detail = 'The request body is larger than this server accepts.'
    return sendProblem(reply, problem(413, 'payload_too_large', detail, id))
  }
  // Fastify's own client errors (body too large, bad JSON, unsupported media type) carry a
  // safe message and a 4xx status; anything else is a bug: log it, answer a generic 500.
  if (
    typeof error.statusCode === 'number' &&
    error.statusCode >= 400 &&
    error.statusCode < 500 &&
    error.code?.startsWith('FST_')
  ) {
    return sendProblem(reply, problem(error.statusCode, 'validation_failed', error.message, id))
  }
  request.log.error({ err: error }, 'unhandled error')
  return sendProblem(reply, problem(500, 'internal_error', 'An unexpected error occurred.', id))
}

function sendProblem(reply: FastifyReply, body: { status: number }) {
  return reply.code(body.status).type('application/problem+json').send(body)
}
