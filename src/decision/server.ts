/**
 * The forward-auth decision API (docs/forward-auth.md): nginx `auth_request`, ingress-nginx
 * `auth-url`, Caddy `forward_auth`, Traefik `forwardAuth` and Envoy's HTTP `ext_authz` ask
 * it about a request and carry the bytes themselves. A thin node:http binding of decide.ts:
 * it reads the request, decides, and answers 200 with the identity headers, or exactly the
 * refusal tokengate would have sent the client.
 *
 * Why its own listener, not a path on the API port: the original method and URI arrive in
 * headers that only the proxy may set, so the port is bound to where only the proxy reaches
 * it; and the original path then keeps its own meaning on the request line (Envoy sends it
 * there), with no path of tokengate's to collide with.
 */
import type * as Http from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo, Socket } from 'node:net'
import { createEdge, recordPreGateRefusal, requestIdFor } from '../auth/edge.ts'
import type { Outcome } from '../auth/gate.ts'
import type { OpenedGate } from '../auth/open-gate.ts'
import { policyInForce, type StoredPolicySource } from '../auth/policy/reload.ts'
import type { Config } from '../config/schema.ts'
import { corsSettings } from '../http/cors.ts'
import { sendFailureResponse } from '../http/node-response.ts'
import { problemResponse } from '../http/problem-response.ts'
import type { ConnectionBudget } from '../lib/connection-budget.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'
import { CACHE_EXPIRY_HEADER, type ChangeFreshness, createCacheExpiry } from './cache-expiry.ts'
import { type Answer, createDecider } from './decide.ts'
import { createDiagnostics } from './diagnostics.ts'
import { clientAddressOf } from './forwarded-request.ts'
import { cannotListen } from './listen-error.ts'
import {
  createProxyMatcher,
  familyMismatch,
  PROXY_RULES,
  type ProxyKind,
  type ProxyMatcher,
} from './proxy-kinds.ts'

export interface BuildDecisionServerOptions {
  readonly config: Readonly<Config>
  /** The process's gate: the same limiter, counters and recorder as the API listener. */
  readonly gate: OpenedGate
  readonly logger: {
    info(fields: object, message: string): void
    warn(fields: object, message: string): void
    error(fields: object, message: string): void
  }
  /** The store the policy is read from with `gateway.policyStore` (change-log reloads). */
  readonly policyStore?: StoredPolicySource | undefined
  /** The process's connection caps, shared with the other listeners (limits-connections.ts). */
  readonly connections?: ConnectionBudget | undefined
  /** How fresh this process's view of the store's changes is: bounds cached decisions. */
  readonly changes?: ChangeFreshness | undefined
}

export interface DecisionServer {
  /** Listens; resolves with `http://host:port`. */
  listen(host: string, port: number): Promise<string>
  /** `http://host:port` of the Envoy gRPC ext_authz service, when `decision.grpcPort` is set. */
  readonly grpcUrl: string | undefined
  close(): Promise<void>
}

export type DecisionConfig = NonNullable<Config['decision']>

/**
 * Header carrying the refusal's problem body, for nginx only: `auth_request` drops the
 * subrequest's body, so the documented config captures this header and returns it as the
 * body (`auth_request_set` + `error_page` + `return`).
 */
export const PROBLEM_HEADER = 'x-tokengate-problem'

/** Envoy's HTTP ext_authz removes the request headers this answer header lists. */
const ENVOY_REMOVE_HEADER = 'x-envoy-auth-headers-to-remove'

const require = createRequire(import.meta.url)
const http = require('node:http') as typeof Http

/**
 * Builds the decision listener (plain HTTP, not listening yet) and, with `decision.grpcPort`,
 * starts the Envoy gRPC ext_authz service beside it. Throws when the policy file or
 * `trustedProxies` is invalid.
 */
export async function buildDecisionServer(
  options: BuildDecisionServerOptions,
): Promise<DecisionServer> {
  const { config, gate: opened, logger } = options
  const decision = config.decision as DecisionConfig
  const trusted = createProxyMatcher(decision)
  const policy = await policyInForce(
    decision.policyFile ?? config.gateway?.policyFile,
    logger,
    options.policyStore,
  )
  const decide = createDecider({
    gate: opened.gate,
    policy: policy.matcher,
    cors: corsSettings(config.server.cors),
  })
  const applied = options.changes?.settled
  const cacheExpiry = createCacheExpiry({
    readAsOf: () => undefined,
    ...options.changes,
    settled: () => !policy.reloading() && (applied?.() ?? true),
  })
  const { recorder } = opened
  // Answers are recorded, and decisions traced, through the edge (auth/edge.ts).
  const edge = createEdge(opened.gate, { listener: 'decision' })
  const diagnostics = createDiagnostics(logger)
  /** A trusted proxy that sends another proxy's headers: one warn line per episode. */
  const diagnoseKind = (kind: ProxyKind, rawHeaders: readonly string[], peer?: string) => {
    const wrong = familyMismatch(kind, rawHeaders)
    if (!wrong) return
    const [suggested] = wrong.kinds
    diagnostics.warn(
      `proxy_kind:${kind}:${suggested}`,
      { listener: 'decision', peer, proxy: kind, expected: wrong.expected, arrived: wrong.arrived },
      `decision listener: the trusted proxy at ${peer} is configured as ${kind} (decision.proxy or decision.trustedProxies), which sends ${wrong.expected}, but it sent ${wrong.arrived}: such requests are answered 400 (or decided on the request line). If that proxy is ${wrong.kinds.join(' or ')}, set decision.proxy: ${suggested} (or "${peer}=${suggested}" in decision.trustedProxies)`,
    )
  }

  /** The request handler of a listener that believes proxies as `trusted` says. */
  const handlerFor =
    (trusted: ProxyMatcher) => (req: Http.IncomingMessage, res: Http.ServerResponse) => {
      const started = performance.now()
      const requestId = requestIdFor(req.headers['x-request-id'])
      const kind = trusted(req.socket.remoteAddress)
      const clientAddress = clientAddressOf(req, trusted)
      req.resume()
      if (kind) diagnoseKind(kind, req.rawHeaders, req.socket.remoteAddress)
      const span = edge.span(req.method ?? 'GET', req.rawHeaders)
      const asked = () =>
        decide({
          kind,
          requestLine: { method: req.method ?? 'GET', url: req.url ?? '/' },
          pathPrefix: decision.pathPrefix,
          rawHeaders: req.rawHeaders,
          clientAddress,
          requestId,
          host: req.headers.host,
        })
      const decided = span ? span.run(asked) : asked()
      let outcome: Outcome | undefined
      if (edge.recordsAnswers) {
        res.once('finish', () =>
          edge.answered({
            method: decided.method,
            target: decided.target,
            requestId,
            status: res.statusCode,
            durationMs: performance.now() - started,
            outcome,
            span,
          }),
        )
      }
      const send = (answer: Answer) => {
        if (answer.type !== 'preflight') outcome = answer.outcome
        if (answer.type === 'refuse' && answer.outcome === undefined) {
          const { method, target } = decided
          recordPreGateRefusal(
            opened.gate,
            { method, target, clientAddress, requestId },
            answer.response,
          )
        }
        // nginx's proxy_cache obeys X-Accel-Expires (cache-expiry.ts); other proxies ignore it.
        const expiry =
          kind !== undefined && PROXY_RULES[kind].problemHeader ? cacheExpiry(answer) : undefined
        writeAnswer(res, answer, requestId, kind, expiry)
      }
      if (!isPromiseLike(decided.answer)) return send(decided.answer)
      decided.answer.then(send, (error: unknown) => {
        logger.error({ err: error, reqId: requestId }, 'decision failed')
        const failed = problemResponse('internal_error', 'An unexpected error occurred.', requestId)
        sendFailureResponse(res, failed, requestId)
      })
    }

  const { connections } = options
  const serverFor = (matcher: ProxyMatcher) => {
    const handle = handlerFor(matcher)
    const built = http.createServer(
      {
        maxHeaderSize: config.server.maxHeaderBytes,
        requestTimeout: config.server.requestTimeoutMs,
      },
      handle,
    )
    if (connections) built.on('connection', (socket: Socket) => connections.admit(socket))
    return built
  }
  const server = serverFor(trusted)
  // Two proxies on one host share an address, and an address is one proxy: each further
  // kind gets its own listener, believing its own family from the same addresses.
  const extra = decision.listeners.map((listener) => ({
    listener,
    server: serverFor(
      createProxyMatcher({
        trustedProxies: decision.trustedProxies.map((entry) => entry.split('=')[0]?.trim() ?? ''),
        proxy: listener.proxy,
      }),
    ),
  }))
  const grpc =
    decision.grpcPort === undefined
      ? undefined
      : await (await import('./envoy-grpc.ts')).startEnvoyGrpc({
          host: decision.host,
          port: decision.grpcPort,
          decide,
          trusted,
          recorder,
          edge,
          logger,
          connections,
          diagnostics,
        })
  return {
    grpcUrl: grpc?.url,
    listen: async (host, port) => {
      const url = await listenOn(server, host, port)
      for (const [i, { listener, server: other }] of extra.entries()) {
        const at = await listenOn(other, host, listener.port).catch((error: unknown) => {
          const name = `decision listener for ${listener.proxy} (decision.listeners[${i}].port)`
          throw cannotListen(name, host, listener.port, error)
        })
        logger.info(
          { listener: 'decision', proxy: listener.proxy },
          `listening on ${at}: decision for ${listener.proxy} (decision.listeners[${i}])`,
        )
      }
      return url
    },
    close: async () => {
      await grpc?.close()
      policy.close()
      await Promise.all([server, ...extra.map((e) => e.server)].map(closeServer))
    },
  }
}

function listenOn(server: Http.Server, host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      const address = server.address() as AddressInfo
      const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address
      resolve(`http://${shown}:${address.port}`)
    })
  })
}

function closeServer(server: Http.Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.closeIdleConnections()
    server.close(() => resolve())
    if (!server.listening) resolve()
  })
}

/** Writes an answer as the proxy at `kind` reads it. */
function writeAnswer(
  res: Http.ServerResponse,
  answer: Answer,
  requestId: string,
  kind: ProxyKind | undefined,
  expiry: string | undefined,
): void {
  switch (answer.type) {
    case 'preflight':
      res.writeHead(204, { ...answer.headers, 'x-request-id': requestId, 'content-length': '0' })
      return void res.end()
    case 'allow': {
      const headers: Record<string, string | string[]> = {
        ...answer.client,
        ...answer.upstream,
        'x-request-id': requestId,
        'content-length': '0',
      }
      if (answer.remove.length > 0) headers[ENVOY_REMOVE_HEADER] = [...answer.remove]
      if (expiry !== undefined) headers[CACHE_EXPIRY_HEADER] = expiry
      res.writeHead(200, headers)
      return void res.end()
    }
    case 'refuse': {
      // nginx drops the subrequest's body: the problem travels in a header it can return.
      const extra =
        kind !== undefined && PROXY_RULES[kind].problemHeader
          ? {
              [PROBLEM_HEADER]: asciiJson(JSON.stringify(answer.response.body)),
              ...(expiry === undefined ? {} : { [CACHE_EXPIRY_HEADER]: expiry }),
            }
          : undefined
      sendFailureResponse(res, answer.response, requestId, extra)
      return
    }
    default:
      answer satisfies never
  }
}

/** JSON with every non-ASCII character escaped (`\uXXXX`): the same value, header-safe. */
function asciiJson(json: string): string {
  return json.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}
