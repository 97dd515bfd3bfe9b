import type * as Http from 'node:http'
import type * as Https from 'node:https'
import { createRequire } from 'node:module'
import type { AddressInfo, Socket } from 'node:net'
import Fastify, { type FastifyInstance, LogController } from 'fastify'
import { requestIdFor } from '../auth/edge.ts'
import type { ProblemCode } from '../http/problem.ts'
import { createAdminGate } from './admin-gate.ts'
import { registerAdminApi } from './api.ts'
import { registerConsole } from './console.ts'
import { type AdminContext, type AdminDeps, problemFor, sendProblem } from './context.ts'
import { createOperatorVerifier } from './operators.ts'
import { createSessions } from './sessions.ts'

const require = createRequire(import.meta.url)
const http = require('node:http') as typeof Http
const https = require('node:https') as typeof Https

/**
 * Security headers of every admin response. The console loads only its own files (no
 * inline script or style, no CDN), cannot be framed, and nothing is cached (pages show
 * tokens once and operator data always).
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "object-src 'none'",
].join('; ')

/** Builds the admin app (API + console) without listening. */
export async function buildAdminServer(deps: AdminDeps): Promise<FastifyInstance> {
  const { config, tls } = deps
  const app = Fastify({
    loggerInstance: deps.logger.child({ listener: 'admin' }),
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 65_536,
    trustProxy: false,
    // The one request-id rule and the process's one generator (auth/edge.ts), as on the API
    // port; never Fastify's req-N.
    genReqId: (req) => requestIdFor(req.headers['x-request-id']),
    serverFactory: (handler) =>
      tls
        ? https.createServer({ cert: tls.cert, key: tls.key, minVersion: 'TLSv1.2' }, handler)
        : http.createServer(handler),
  }) as unknown as FastifyInstance
  const operators = createOperatorVerifier(
    config,
    deps.store.admin,
    deps.clock,
    deps.jwtRevocations,
  )
  const sessions = createSessions(deps.store.admin, {
    ttlMs: config.admin.sessionTtlMs,
    idleMs: config.admin.sessionIdleMs,
  })
  const gate = createAdminGate({
    config,
    operators,
    sessions,
    store: deps.store,
    clock: deps.clock,
    log: deps.logger,
  })
  const context: AdminContext = { ...deps, operators, sessions, gate }
  app.addHook('onClose', () => context.operators.close())
  // JSON (the API) and form posts (the console) only: any other body is 415 before a handler
  // runs (Fastify's text/plain parser would hand a handler a string it never expects).
  app.removeContentTypeParser('text/plain')
  app.addContentTypeParser(
    'application/x-www-form-urlencoded',
    { parseAs: 'string' },
    (_request, body, done) => done(null, Object.fromEntries(new URLSearchParams(String(body)))),
  )
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('content-security-policy', CONTENT_SECURITY_POLICY)
    reply.header('x-frame-options', 'DENY')
    reply.header('x-content-type-options', 'nosniff')
    // Not `no-referrer`: with it Chromium sends `Origin: null` on form posts, which the
    // same-origin check must refuse. Nothing secret is ever in a console URL.
    reply.header('referrer-policy', 'same-origin')
    reply.header('cross-origin-opener-policy', 'same-origin')
    reply.header('cross-origin-resource-policy', 'same-origin')
    reply.header('cache-control', 'no-store')
    reply.header('x-request-id', request.id)
    if (tls) reply.header('strict-transport-security', 'max-age=31536000')
    done()
  })
  app.addHook('onResponse', (request, reply, done) => {
    // Path only: query strings may carry search terms; tokens never travel in URLs here.
    request.log.info(
      {
        method: request.method,
        path: request.url.split('?', 1)[0],
        status: reply.statusCode,
        actor: request.operator?.actor,
      },
      'admin request',
    )
    done()
  })
  registerAdminApi(app, context)
  const consolePages = registerConsole(app, context)
  app.get('/', (_request, reply) => reply.redirect('/admin/', 303))
  app.get('/favicon.ico', (_request, reply) => reply.code(204).send())
  // A browser asking for a page gets an HTML page; the API and scripts get a problem.
  app.setNotFoundHandler((request, reply) =>
    !request.url.startsWith('/admin/api/') &&
    (request.method === 'GET' || request.method === 'HEAD') &&
    /\btext\/html\b/.test(request.headers.accept ?? '')
      ? consolePages.notFound(request, reply)
      : sendProblem(reply, 404, 'not_found', 'No such endpoint.', request),
  )
  app.setErrorHandler((error, request, reply) => {
    const mapped = problemFor(error)
    if (mapped) return sendProblem(reply, mapped.status, mapped.code, mapped.detail, request)
    const client = clientError(error)
    if (client) return sendProblem(reply, client.status, client.code, client.detail, request)
    request.log.error({ err: error }, 'admin request failed')
    return sendProblem(reply, 503, 'unavailable', 'The store is not reachable.', request)
  })
  return app
}

/**
 * Fastify's own client errors (an unsupported content type, a body too large or not JSON) as
 * problems with fixed, client-safe details: never a 503, which would page whoever watches for
 * outages, and never the parser's message, which quotes the request.
 */
function clientError(
  error: unknown,
): { status: number; code: ProblemCode; detail: string } | undefined {
  const { statusCode, code } = error as { statusCode?: unknown; code?: unknown }
  if (typeof code !== 'string' || !code.startsWith('FST_') || typeof statusCode !== 'number') {
    return undefined
  }
  if (statusCode === 415) {
    return {
      status: 415,
      code: 'unsupported_media_type',
      detail: 'Send application/json (the API) or application/x-www-form-urlencoded (the console).',
    }
  }
  if (statusCode === 413)
    return { status: 413, code: 'payload_too_large', detail: 'Request body too large.' }
  if (statusCode >= 400 && statusCode < 500) {
    return { status: 400, code: 'validation_failed', detail: 'Malformed request body.' }
  }
  return undefined
}

export interface AdminListener {
  /** e.g. `https://127.0.0.1:9443` */
  readonly url: string
  close(): Promise<void>
}

/**
 * Builds the admin app and listens on `admin.host`/`admin.port`; `listenText` turns the
 * listener's real URL (`https://` unless plain HTTP) into its start-up log line.
 */
export async function startAdminListener(
  deps: AdminDeps,
  listenText: (url: string) => string = (url) => `listening on ${url}`,
  connections?: { admit(socket: Socket): boolean },
): Promise<AdminListener> {
  const app = await buildAdminServer(deps)
  // The process's one connection budget (lib/connection-budget.ts): descriptors are shared.
  if (connections) app.server.on('connection', (socket: Socket) => connections.admit(socket))
  const scheme = deps.tls ? 'https' : 'http'
  try {
    await app.listen({
      host: deps.config.admin.host,
      port: deps.config.admin.port,
      // Fastify names every address http://, whatever serverFactory made.
      listenTextResolver: (address) => listenText(address.replace(/^http:/, `${scheme}:`)),
    })
  } catch (error) {
    await app.close()
    throw error
  }
  const address = app.server.address() as AddressInfo
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address
  return {
    url: `${scheme}://${host}:${address.port}`,
    close: () => app.close(),
  }
}
