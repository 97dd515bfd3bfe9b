import type * as Http from 'node:http'
import type * as Https from 'node:https'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import Fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify'
import type { Logger } from 'pino'
import { storeAuditSink } from '../auth/audit-events.ts'
import { type OperationDeps, OperationRefused, type RefusalCode } from '../auth/operations.ts'
import type { Config } from '../config/schema.ts'
import type { IssuerConfig } from '../core/issuer.ts'
import type { JwksStatus } from '../core/jwks.ts'
import type { Clock } from '../core/ports.ts'
import { PROBLEM_CONTENT_TYPE, type ProblemCode, problem } from '../http/problem.ts'
import { InvalidCursorError, InvalidPageLimitError } from '../stores/cursor.ts'
import type { Store } from '../stores/store.ts'
import { registerAdminApi } from './api.ts'
import { registerConsole } from './console.ts'
import { createOperatorVerifier, type Operator, type OperatorVerifier } from './operators.ts'
import { createSessions, type Sessions } from './sessions.ts'
import type { TrafficRecorder } from './traffic.ts'

const require = createRequire(import.meta.url)
const http = require('node:http') as typeof Http
const https = require('node:https') as typeof Https

/** What the admin listener reads and acts on; all of it is the running server's own state. */
export interface AdminDeps {
  readonly config: Readonly<Config>
  readonly store: Store
  /** The running server's issuer registry: trusted issuers and their key-source health. */
  readonly issuers: {
    issuers(): readonly IssuerConfig[]
    keyStatus(): readonly JwksStatus[]
  }
  readonly clock: Clock
  readonly logger: Logger
  readonly tls: { readonly cert: string | Buffer; readonly key: string | Buffer } | undefined
  readonly traffic: TrafficRecorder
  /** Postgres change feed state; undefined on SQLite (one process, no feed needed). */
  readonly changeFeed: () => { connected: boolean } | undefined
}

/** What every admin handler gets. */
export interface AdminContext extends AdminDeps {
  readonly operators: OperatorVerifier
  readonly sessions: Sessions
}

declare module 'fastify' {
  interface FastifyRequest {
    operator?: Operator
  }
}

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
    serverFactory: (handler) =>
      tls
        ? https.createServer({ cert: tls.cert, key: tls.key, minVersion: 'TLSv1.2' }, handler)
        : http.createServer(handler),
  }) as unknown as FastifyInstance
  const context: AdminContext = {
    ...deps,
    operators: createOperatorVerifier(config, deps.store.admin, deps.clock),
    sessions: createSessions({
      ttlMs: config.admin.sessionTtlMs,
      idleMs: config.admin.sessionIdleMs,
    }),
  }
  app.addHook('onClose', () => context.operators.close())
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
  registerConsole(app, context)
  app.get('/', (_request, reply) => reply.redirect('/admin/', 303))
  app.get('/favicon.ico', (_request, reply) => reply.code(204).send())
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, 404, 'not_found', 'No such endpoint.', request),
  )
  app.setErrorHandler((error, request, reply) => {
    const mapped = problemFor(error)
    if (mapped) return sendProblem(reply, mapped.status, mapped.code, mapped.detail, request)
    if ((error as { statusCode?: number }).statusCode === 413) {
      return sendProblem(reply, 413, 'payload_too_large', 'Request body too large.', request)
    }
    if ((error as { statusCode?: number }).statusCode === 400) {
      return sendProblem(reply, 400, 'validation_failed', 'Malformed request body.', request)
    }
    request.log.error({ err: error }, 'admin request failed')
    return sendProblem(reply, 503, 'unavailable', 'The store is not reachable.', request)
  })
  return app
}

const REFUSAL_STATUS: Readonly<Record<RefusalCode, number>> = {
  invalid_input: 400,
  tenant_unknown: 404,
  token_unknown: 404,
  issuer_unknown: 404,
  tenant_exists: 409,
  tenant_disabled: 409,
  token_revoked: 409,
  token_rotated: 409,
  token_changed: 409,
}

/** The problem an expected error maps to; undefined for anything else (a 503, fail closed). */
export function problemFor(
  error: unknown,
): { status: number; code: ProblemCode; detail: string } | undefined {
  if (error instanceof OperationRefused) {
    const status = REFUSAL_STATUS[error.code]
    return {
      status,
      code: status === 404 ? 'not_found' : 'validation_failed',
      detail: error.message,
    }
  }
  if (error instanceof InvalidCursorError || error instanceof InvalidPageLimitError) {
    return { status: 400, code: 'validation_failed', detail: error.message }
  }
  return undefined
}

export function sendProblem(
  reply: FastifyReply,
  status: number,
  code: ProblemCode,
  detail: string,
  request: FastifyRequest,
  headers: Record<string, string> = {},
) {
  return reply
    .code(status)
    .headers(headers)
    .type(PROBLEM_CONTENT_TYPE)
    .send(problem(status, code, detail, String(request.id)))
}

/**
 * What an operator's request runs application-layer operations with: the operator as the
 * audit actor (with the client address and request id), events written before the answer.
 */
export function operationDeps(
  request: FastifyRequest,
  operator: Operator,
  ctx: Pick<AdminDeps, 'store' | 'clock'>,
): OperationDeps {
  return {
    store: ctx.store,
    clock: ctx.clock,
    actor: { actor: operator.actor, clientAddress: request.ip, requestId: String(request.id) },
    audit: storeAuditSink(ctx.store, () => ctx.clock.now()),
  }
}

export interface AdminListener {
  /** e.g. `https://127.0.0.1:9443` */
  readonly url: string
  close(): Promise<void>
}

/** Builds the admin app and listens on `admin.host`/`admin.port`. */
export async function startAdminListener(deps: AdminDeps): Promise<AdminListener> {
  const app = await buildAdminServer(deps)
  await app.listen({ host: deps.config.admin.host, port: deps.config.admin.port })
  const address = app.server.address() as AddressInfo
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address
  return {
    url: `${deps.tls ? 'https' : 'http'}://${host}:${address.port}`,
    close: () => app.close(),
  }
}
