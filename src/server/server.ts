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
import { createEdge, requestIdFor } from '../auth/edge.ts'
import { registerEdgeHooks } from '../auth/edge-fastify.ts'
import { type OpenedGate, openGate } from '../auth/open-gate.ts'
import type { Config } from '../config/schema.ts'
import { API_PREFIX } from '../http/api-path.ts'
import { CORS_ALLOWED_HEADERS, CORS_EXPOSED_HEADERS, CORS_METHODS } from '../http/cors.ts'
import { problemResponse, sendProblemResponse, storeUnavailable } from '../http/problem-response.ts'
import { type ConnectionBudget, createConnectionBudget } from '../lib/connection-budget.ts'
import { createClientErrorHandler } from './client-error.ts'
import { registerHealthRoutes, type SsfReceiverReadiness } from './health.ts'
import { limitConnections } from './limits-connections.ts'
import type { Metrics } from './metrics.ts'
import { lazyChildLogger } from './request-logger.ts'
import { RequestFieldError } from './routes/pagination.ts'
import { StoreUnavailableError } from './routes/route.ts'
import { serializerSchema } from './routes/serializer-schema.ts'
import { v1Routes } from './routes/v1/index.ts'
import { type TlsMaterial, tlsServerOptions } from './tls.ts'

export interface BuildServerOptions {
  readonly config: Readonly<Config>
  readonly auth: AuthContext
  readonly logger: Logger
  /** HTTPS material; omitted only for the explicit plain-HTTP listener. */
  readonly tls?: TlsMaterial | undefined
  /** Prometheus metrics to record into (served on their own listener, see metrics.ts). */
  readonly metrics?: Metrics | undefined
  /**
   * The process's gate (one limiter and recorder for every listener; main.ts opens it).
   * Omitted: the server opens its own and closes it with the app.
   */
  readonly gate?: OpenedGate | undefined
  /**
   * Mounted after the built-in routes (the gateway's catch-all proxy): the composition root
   * wires them in, so the server never imports the gateway.
   */
  readonly mounts?: readonly ((app: FastifyInstance) => Promise<void>)[] | undefined
  /**
   * The process's connection caps, shared by all its listeners (main.ts). Omitted: the
   * server counts its own sockets against `config.server`'s caps.
   */
  readonly connections?: ConnectionBudget | undefined
  /** The CAEP/SSF receivers' states, listed by `/readyz` (health.ts). */
  readonly ssfReadiness?: (() => readonly SsfReceiverReadiness[]) | undefined
}

// Why require and not `import http from 'node:http'`: to build an ES module namespace for a
// built-in, Node reads every export, which loads its bundled undici at start-up, and this
// server never uses it.
const require = createRequire(import.meta.url)
const http = require('node:http') as typeof Http
const https = require('node:https') as typeof Https

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
  // One instance type for both listeners: handlers never depend on which one it is.
  const app = Fastify({
    loggerInstance: logger,
    // One log line per request is written by our onResponse hook, with the token fingerprint.
    logController: new LogController({ disableRequestLogging: true }),
    // request.log becomes a pino child only if the request logs something (request-logger.ts).
    childLoggerFactory: lazyChildLogger,
    bodyLimit: config.server.bodyLimitBytes,
    // During a drain the listener is closed first; a request on a connection taken before it
    // is served, not refused with 503 (issue #30: podman stop under load answered 4-5 with 503).
    return503OnClosing: false,
    // The route schemas are ours and fixed (their tests and the OpenAPI test cover them), so
    // Ajv need not compile the draft-07 meta-schema to check them at every start.
    ajv: { customOptions: { validateSchema: false } },
    trustProxy: config.server.trustProxy,
    requestIdHeader: false,
    genReqId: (req) => requestIdFor(req.headers['x-request-id']),
    clientErrorHandler: createClientErrorHandler(logger),
    serverFactory: (handler) => {
      let headReceived: (request: Http.IncomingMessage) => void = () => {}
      const onRequest = (request: Http.IncomingMessage, response: Http.ServerResponse) => {
        headReceived(request)
        handler(request, response)
      }
      const server = tls
        ? https.createServer(
            {
              ...serverOptions,
              ...tlsServerOptions(tls),
              handshakeTimeout: config.server.firstByteTimeoutMs,
            },
            onRequest,
          )
        : http.createServer(serverOptions, onRequest)
      headReceived = limitConnections(
        server,
        tls !== undefined,
        config.server,
        options.connections ?? createConnectionBudget(config.server),
      )
      return server
    },
  }) as unknown as FastifyInstance

  const hsts =
    tls && config.server.hstsMaxAgeSec > 0 ? `max-age=${config.server.hstsMaxAgeSec}` : undefined
  // Callback-style hooks here and below: a hook with no asynchronous work costs no promise.
  app.addHook('onRequest', (request, reply, done) => {
    // Every answer of this server is per caller (a token's view, a problem about its
    // request, readiness now): no shared cache may keep or replay one.
    reply.header('cache-control', 'no-store')
    reply.header('x-request-id', request.id)
    if (hsts) reply.header('strict-transport-security', hsts)
    done()
  })

  // First of the plugins: a preflight is answered before any limit or authentication.
  const { origins, maxAgeSec } = config.server.cors
  if (origins.length > 0) await registerCors(app, origins, maxAgeSec)

  const opened =
    options.gate ??
    (await openGate(auth, {
      rateLimit: config.rateLimit,
      quota: config.quota,
      usage: config.usage,
      redisUrl: config.redisUrl,
      log: logger,
      metrics,
    }))
  if (!options.gate) app.addHook('onClose', () => opened.close())
  // The edge (auth/edge.ts) through the same Fastify hooks as `tokengate/fastify`.
  const prefix = `${API_PREFIX}/`
  registerEdgeHooks(app, createEdge(opened.gate, { prefix }), { prefix, idsDecided: true })

  const context = { auth, config }
  for (const route of v1Routes) {
    app.route({
      method: route.method,
      url: `${API_PREFIX}${route.path}`,
      // The OpenAPI document shows route.schema as written; the serializer gets an
      // equivalent schema it can apply without running the validator (serializer-schema.ts).
      schema: { ...route.schema, response: serializerSchemas(route.schema.response) },
      config: { permissions: route.permissions },
      handler: route.handler(context),
    })
  }
  registerHealthRoutes(app, auth, opened.redisState, options.ssfReadiness)

  app.setNotFoundHandler((request, reply) =>
    sendProblemResponse(
      reply,
      problemResponse('not_found', 'No such endpoint.', String(request.id)),
    ),
  )
  app.setErrorHandler((error: FastifyError, request, reply) => handleError(error, request, reply))
  // After the handlers: a mount's scope (the gateway) inherits them only if
  // they are set when it registers, or its errors get Fastify's default JSON.
  for (const mount of options.mounts ?? []) await mount(app)
  return app
}

/**
 * CORS for the configured origins only (the lists of http/cors.ts), with @fastify/cors (its
 * `onRequest` hook runs before the gate binding's, so a preflight from an allowed origin is
 * answered without a token). An
 * origin not listed gets no `Access-Control-*` header at all (the origin callback answers
 * `false`), and its preflight is answered 204 by the gate binding, never checked or
 * counted. `Vary: Origin` on every response, so caches never mix origins. No credentials
 * mode: tokens travel in `Authorization`, never cookies.
 */
async function registerCors(app: FastifyInstance, origins: readonly string[], maxAgeSec: number) {
  const { default: cors } = await import('@fastify/cors')
  const allowed = new Set(origins)
  await app.register(cors, {
    origin: (origin, callback) => callback(null, origin !== undefined && allowed.has(origin)),
    methods: [...CORS_METHODS],
    allowedHeaders: [...CORS_ALLOWED_HEADERS],
    exposedHeaders: [...CORS_EXPOSED_HEADERS],
    maxAge: maxAgeSec,
    strictPreflight: false,
  })
}

function serializerSchemas(response: Readonly<Record<number, object>>): Record<number, object> {
  return Object.fromEntries(
    Object.entries(response).map(([status, schema]) => [status, serializerSchema(schema)]),
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
    return sendProblemResponse(
      reply,
      problemResponse('validation_failed', detail, id, { extra: { errors } }),
    )
  }
  if (error instanceof RequestFieldError) {
    const detail = `${error.field}: ${error.message}`
    return sendProblemResponse(
      reply,
      problemResponse('validation_failed', detail, id, {
        extra: { errors: [{ field: error.field, message: error.message }] },
      }),
    )
  }
  if (error instanceof StoreUnavailableError) {
    request.log.warn({ err: error.cause }, 'store unavailable')
    return sendProblemResponse(reply, storeUnavailable(id))
  }
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    const detail = 'The request body is larger than this server accepts.'
    return sendProblemResponse(reply, problemResponse('payload_too_large', detail, id))
  }
  // Fastify's own client errors (body too large, bad JSON, unsupported media type) carry a
  // safe message and a 4xx status; anything else is a bug: log it, answer a generic 500.
  if (
    typeof error.statusCode === 'number' &&
    error.statusCode >= 400 &&
    error.statusCode < 500 &&
    error.code?.startsWith('FST_')
  ) {
    const code = error.statusCode === 415 ? 'unsupported_media_type' : 'validation_failed'
    return sendProblemResponse(
      reply,
      problemResponse(code, error.message, id, { status: error.statusCode }),
    )
  }
  request.log.error({ err: error }, 'unhandled error')
  return sendProblemResponse(
    reply,
    problemResponse('internal_error', 'An unexpected error occurred.', id),
  )
}
