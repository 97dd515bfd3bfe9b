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
import {
  CACHE_EXPIRY_HEADER,
  type ChangeFreshness,
  createCacheExpiry,
  KEEP_ASK_HEADER,
  KEEP_MS_HEADER,
  type KeepTime,
} from './cache-expiry.ts'
import { type Answer, type AskedRequest, createDecider, type Decided } from './decide.ts'
import { createDiagnostics } from './diagnostics.ts'
import { clientAddressFrom } from './forwarded-request.ts'
import { cannotListen } from './listen-error.ts'
import {
  createProxyMatcher,
  familyMismatch,
  PROXY_RULES,
  type ProxyKind,
  type ProxyMatcher,
} from './proxy-kinds.ts'
import { listenOnSocket } from './unix-socket.ts'

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
  /** Listens; resolves with `http://host:port`, or `unix:<path>` with `decision.socket`. */
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

  /**
   * The request handler of a listener that believes proxies as `trusted` says, or, on the
   * Unix socket, every peer as `socketPeer` (the file's mode decides who connects).
   */
  const handlerFor = (trusted: ProxyMatcher, socketPeer?: Peer) => {
    // A connection's peer never changes: its address and proxy kind are read once per
    // connection, not per request (the matcher parses the address and walks BlockLists).
    const peers = new WeakMap<Socket, Peer>()
    const peerOf = (socket: Socket): Peer => {
      if (socketPeer) return socketPeer
      let peer = peers.get(socket)
      if (peer === undefined) {
        const address = socket.remoteAddress
        peer = { address, kind: trusted(address) }
        if (address !== undefined) peers.set(socket, peer)
      }
      return peer
    }
    return (req: Http.IncomingMessage, res: Http.ServerResponse) => {
      const started = edge.recordsAnswers ? performance.now() : 0
      const { rawHeaders, headers } = req
      const requestId = requestIdFor(headers['x-request-id'])
      const peer = peerOf(req.socket)
      const { kind } = peer
      const forwardedFor = headers['x-forwarded-for']
      const clientAddress = clientAddressFrom(
        peer.address ?? '',
        kind !== undefined,
        Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor,
        trusted,
      )
      // A request with a body (Envoy's with_request_body) is drained; one without is born ended.
      if (!req.readableEnded) req.resume()
      if (kind) diagnoseKind(kind, rawHeaders, peer.address ?? peer.label)
      const asked: AskedRequest = {
        kind,
        requestLine: { method: req.method ?? 'GET', url: req.url ?? '/' },
        pathPrefix: decision.pathPrefix,
        rawHeaders,
        clientAddress,
        requestId,
        host: headers.host,
      }
      const span = edge.span(asked.requestLine.method, rawHeaders, req.socket)
      const decided = span ? span.run(() => decide(asked)) : decide(asked)
      const answered: Answering = { res, decided, requestId, kind, clientAddress }
      if (edge.recordsAnswers) {
        res.once('finish', () =>
          edge.answered({
            method: decided.method,
            target: decided.target,
            requestId,
            status: res.statusCode,
            durationMs: performance.now() - started,
            outcome: answered.outcome,
            span,
          }),
        )
      }
      if (!isPromiseLike(decided.answer)) return send(answered, decided.answer)
      decided.answer.then(
        (answer) => send(answered, answer),
        (error: unknown) => {
          logger.error({ err: error, reqId: requestId }, 'decision failed')
          const failed = problemResponse(
            'internal_error',
            'An unexpected error occurred.',
            requestId,
          )
          sendFailureResponse(res, failed, requestId)
        },
      )
    }
  }

  /** Writes `answer` for the request `answering` stands for; notes its outcome for the record. */
  const send = (answering: Answering, answer: Answer) => {
    const { res, requestId, kind } = answering
    if (answer.type !== 'preflight') answering.outcome = answer.outcome
    if (answer.type === 'refuse' && answer.outcome === undefined) {
      const { method, target } = answering.decided
      const { clientAddress } = answering
      recordPreGateRefusal(
        opened.gate,
        { method, target, clientAddress, requestId },
        answer.response,
      )
    }
    // nginx's proxy_cache obeys X-Accel-Expires, the Lua example X-Tokengate-Keep-Ms, which
    // it asks for (cache-expiry.ts); other proxies keep nothing.
    const expiry =
      kind !== undefined && PROXY_RULES[kind].problemHeader ? cacheExpiry(answer) : undefined
    writeAnswer(res, answer, requestId, kind, expiry)
  }

  const { connections } = options
  const serverFor = (matcher: ProxyMatcher, socketPeer?: Peer) => {
    const handle = handlerFor(matcher, socketPeer)
    const built = http.createServer(
      {
        maxHeaderSize: config.server.maxHeaderBytes,
        requestTimeout: config.server.requestTimeoutMs,
        // No stream life cycle ('end', 'close', a resume tick) for a bodyless ask (Node 24.12).
        optimizeEmptyRequests: true,
      },
      handle,
    )
    if (connections) built.on('connection', (socket: Socket) => connections.admit(socket))
    return built
  }
  const { socket } = decision
  const server = serverFor(
    trusted,
    socket && { address: undefined, kind: decision.proxy, label: `unix:${socket.path}` },
  )
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
      const url = socket ? await listenOnSocket(server, socket) : await listenOn(server, host, port)
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

/** A connection's peer: its address and the proxy kind configured for it (if trusted). */
interface Peer {
  readonly address: string | undefined
  readonly kind: ProxyKind | undefined
  /** Where a peer without an address connected (the Unix socket), for log lines. */
  readonly label?: string
}

/** One request being answered: what `send` needs, and the outcome for the answer's record. */
interface Answering {
  readonly res: Http.ServerResponse
  readonly decided: Decided
  readonly requestId: string
  readonly kind: ProxyKind | undefined
  readonly clientAddress: string
  outcome?: Outcome | undefined
}

/** Writes an answer as the proxy at `kind` reads it. */
function writeAnswer(
  res: Http.ServerResponse,
  answer: Answer,
  requestId: string,
  kind: ProxyKind | undefined,
  expiry: KeepTime | undefined,
): void {
  switch (answer.type) {
    case 'preflight':
      res.writeHead(204, { ...answer.headers, 'x-request-id': requestId, 'content-length': '0' })
      return void res.end()
    case 'allow': {
      // One flat [name, value, ...] list: no object of the answer's headers built per request.
      const headers: string[] = []
      pushHeaders(headers, answer.client)
      pushHeaders(headers, answer.upstream)
      headers.push('x-request-id', requestId, 'content-length', '0')
      for (const name of answer.remove) headers.push(ENVOY_REMOVE_HEADER, name)
      if (expiry !== undefined) {
        headers.push(CACHE_EXPIRY_HEADER, expiry.accelExpires)
        if (expiry.keepMs > 0 && res.req.headers[KEEP_ASK_HEADER] === 'ms') {
          headers.push(KEEP_MS_HEADER, String(expiry.keepMs))
        }
      }
      res.writeHead(200, headers)
      return void res.end()
    }
    case 'refuse': {
      // nginx drops the subrequest's body: the problem travels in a header it can return.
      const extra =
        kind !== undefined && PROXY_RULES[kind].problemHeader
          ? {
              [PROBLEM_HEADER]: asciiJson(JSON.stringify(answer.response.body)),
              ...(expiry === undefined ? {} : { [CACHE_EXPIRY_HEADER]: expiry.accelExpires }),
            }
          : undefined
      sendFailureResponse(res, answer.response, requestId, extra)
      return
    }
    default:
      answer satisfies never
  }
}

/** Appends a record's headers to a flat list; a name in both records is sent by both. */
function pushHeaders(headers: string[], record: Readonly<Record<string, string>>): void {
  for (const name in record) headers.push(name, record[name] as string)
}

/** JSON with every non-ASCII character escaped (`\uXXXX`): the same value, header-safe. */
function asciiJson(json: string): string {
  return json.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}
