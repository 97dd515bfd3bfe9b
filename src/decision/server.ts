/**
 * The forward-auth decision API (docs/forward-auth.md): nginx `auth_request`, Caddy
 * `forward_auth`, Traefik `forwardAuth` and Envoy `ext_authz` ask it about a request and
 * carry the bytes themselves. It runs the server's own pipeline (failed-authentication gate,
 * authentication, rate limits, audit) and the gateway's route policy, then answers 200 with
 * the identity headers, or exactly the refusal tokengate would have sent the client.
 *
 * Why its own listener, not a path on the API port: the original method and URI arrive in
 * headers that only the proxy may set, so the port is bound to where only the proxy reaches
 * it; and the original path then keeps its own meaning on the request line (Envoy sends it
 * there), with no path of tokengate's to collide with.
 */
import type * as Http from 'node:http'
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
import type { Config } from '../config/schema.ts'
import type { Principal } from '../core/principal.ts'
import { type HeaderMap, IDENTITY_PREFIX, upstreamRequestHeaders } from '../gateway/headers.ts'
import type { IdentityTokenSigner } from '../gateway/identity-token.ts'
import type { PolicyDecision } from '../gateway/policy-matcher.ts'
import { policyMatcherOf } from '../gateway/policy-reload.ts'
import { sendFailure, sendProblem, sendTenantMismatch } from '../gateway/proxy.ts'
import { auditRefusal } from '../gateway/register.ts'
import { pathOf } from '../http/api-path.ts'
import { problem } from '../http/problem.ts'
import type { Metrics } from '../server/metrics.ts'
import { tokengatePlugin } from '../server/plugin.ts'
import { rateLimitPlugin } from '../server/rate-limit.ts'
import { createRequestIdGenerator, lazyChildLogger } from '../server/request-logger.ts'
import { logRequest, recordFailure, recordPatUse, registerReuseDetector } from '../server/server.ts'
import {
  createProxyMatcher,
  type ForwardedRequest,
  readForwardedRequest,
} from './forwarded-request.ts'

export interface BuildDecisionServerOptions {
  readonly config: Readonly<Config>
  readonly auth: AuthContext
  readonly logger: Logger
  /**
   * Adds `X-Auth-Token` to every 200. Its JWKS is served on the API listener only: a route
   * of its own here would answer 200 to a proxy asking about that path, letting the request
   * through to the upstream unauthenticated.
   */
  readonly identityToken?: IdentityTokenSigner | undefined
  /** The instance's metrics: each decision is counted (`tokengate_decisions_total`). */
  readonly metrics?: Metrics | undefined
}

export type DecisionConfig = NonNullable<Config['decision']>

/**
 * Header carrying the refusal's problem body, for nginx only: `auth_request` drops the
 * subrequest's body, so the documented config captures this header and returns it as the
 * body (`auth_request_set` + `error_page` + `return`).
 */
export const PROBLEM_HEADER = 'x-tokengate-problem'

const require = createRequire(import.meta.url)
const http = require('node:http') as typeof Http

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/
/** Methods Node's HTTP parser (and so Fastify's router) knows; anything else is refused. */
const KNOWN_METHODS = new Set(http.METHODS)
const ORIGINAL = Symbol('tokengate.originalRequest')
const NOT_FOUND = 'No such endpoint.'

declare module 'node:http' {
  interface IncomingMessage {
    [ORIGINAL]?: ForwardedRequest
  }
}

/**
 * Builds the decision app (plain HTTP, not listening). The original request is read from the
 * proxy's headers before Fastify sees it, and `req.method`/`req.url` become the original
 * ones, so every step of the pipeline (limits keyed by path prefix, audit lines, logs) sees
 * the request the client made. Throws when the policy file or `trustedProxies` is invalid.
 */
export async function buildDecisionServer(
  options: BuildDecisionServerOptions,
): Promise<FastifyInstance> {
  const { config, auth, logger, identityToken } = options
  const decision = config.decision as DecisionConfig
  const trusted = createProxyMatcher(decision.trustedProxies)
  const policyFile = decision.policyFile ?? config.gateway?.policyFile
  const nextRequestId = createRequestIdGenerator()

  const app = Fastify({
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: lazyChildLogger,
    // The client address (failed-authentication limit, audit) is the one the proxy reports.
    trustProxy: (address: string) => trusted(address),
    requestIdHeader: false,
    genReqId: (req) => {
      const incoming = req.headers['x-request-id']
      return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : nextRequestId()
    },
    serverFactory: (handler) =>
      http.createServer(
        {
          maxHeaderSize: config.server.maxHeaderBytes,
          requestTimeout: config.server.requestTimeoutMs,
        },
        (req, res) => {
          const original = readForwardedRequest(
            req.rawHeaders,
            { method: req.method ?? 'GET', url: req.url ?? '/' },
            { trusted: trusted(req.socket.remoteAddress), pathPrefix: decision.pathPrefix },
          )
          const stated: ForwardedRequest =
            original.ok && !KNOWN_METHODS.has(original.method)
              ? { ok: false, kind: original.kind, reason: 'the original method is not supported' }
              : original
          req[ORIGINAL] = stated
          if (stated.ok) {
            req.method = stated.method
            req.url = stated.url
          }
          handler(req, res)
        },
      ),
  }) as unknown as FastifyInstance
  const fromStore = config.gateway?.policyStore && !decision.policyFile ? auth.store : undefined
  const matcher = await policyMatcherOf(app, policyFile, fromStore)

  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    const original = request.raw[ORIGINAL]
    if (original && !original.ok) {
      return void sendProblem(reply, problem(400, 'validation_failed', original.reason, request.id))
    }
    done()
  })

  // The server's own pipeline, registered as buildServer registers it (src/server/server.ts).
  await app.register(rateLimitPlugin, { config: config.rateLimit, redisUrl: config.redisUrl })
  const reuse = registerReuseDetector(app, auth, logger)
  await app.register(tokengatePlugin, {
    authenticate: auth.authenticate,
    onAuthenticated: (_request, principal) => recordPatUse(auth, principal),
    onFailure: (request, failure) => recordFailure(auth, request, failure, reuse),
  })

  // After the auth plugin's hook: the principal is authenticated and within its limits.
  app.addHook('onRequest', (request, reply, done) => {
    const principal = request.principal
    if (!principal) return done()
    decide(request, reply, principal).catch(done)
  })

  const decide = async (request: FastifyRequest, reply: FastifyReply, principal: Principal) => {
    const requestId = String(request.id)
    const verdict = matcher.decide(request.method, pathOf(request.url), principal)
    if (verdict.outcome !== 'allow') {
      if (verdict.outcome !== 'bad_path') auditRefusal(auth, request, verdict)
      return sendRefusal(reply, verdict, requestId)
    }
    const headers = identityHeaders(principal, requestId)
    if (identityToken) headers['x-auth-token'] = await identityToken.sign(principal)
    return reply.code(200).headers(headers).send()
  }

  app.addHook('onSend', (request, reply, payload, done) => {
    const original = request.raw[ORIGINAL]
    if (reply.statusCode >= 400 && typeof payload === 'string' && original?.kind === 'nginx') {
      reply.header(PROBLEM_HEADER, asciiJson(payload))
    }
    done(null, payload)
  })
  app.addHook('onResponse', (request, reply, done) => {
    options.metrics?.recordDecision(request, reply)
    if (logger.isLevelEnabled('info')) logRequest(request, reply)
    done()
  })

  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem(404, 'not_found', NOT_FOUND, String(request.id))),
  )
  app.setErrorHandler((error: FastifyError, request, reply) => {
    request.log.error({ err: error }, 'decision failed')
    return sendProblem(
      reply,
      problem(500, 'internal_error', 'An unexpected error occurred.', String(request.id)),
    )
  })
  return app
}

/** The identity headers exactly as the gateway sends them upstream (gateway/headers.ts). */
function identityHeaders(principal: Principal, requestId: string): HeaderMap {
  const all = upstreamRequestHeaders(
    {},
    {
      principal,
      requestId,
      stripAuthorization: true,
      forwardedFor: [],
      trustProxy: false,
      protocol: 'http',
      host: '',
    },
  )
  const picked: HeaderMap = {}
  for (const [name, value] of Object.entries(all)) {
    if (name.startsWith(IDENTITY_PREFIX)) picked[name] = value
  }
  return picked
}

/** The gateway's answers to a policy refusal (docs/gateway.md "Answers"). */
function sendRefusal(
  reply: FastifyReply,
  verdict: Exclude<PolicyDecision, { outcome: 'allow' }>,
  requestId: string,
) {
  switch (verdict.outcome) {
    case 'bad_path':
      return sendProblem(reply, problem(400, 'validation_failed', verdict.reason, requestId))
    case 'deny':
      return sendProblem(reply, problem(404, 'not_found', NOT_FOUND, requestId))
    case 'tenant_mismatch':
      return sendTenantMismatch(reply, requestId)
    case 'forbidden':
      return sendFailure(reply, verdict.failure, requestId)
    default:
      return verdict satisfies never
  }
}

/** JSON with every non-ASCII character escaped (`\uXXXX`): the same value, header-safe. */
function asciiJson(json: string): string {
  return json.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}
