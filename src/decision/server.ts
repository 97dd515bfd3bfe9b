/**
 * The forward-auth decision API (docs/forward-auth.md): nginx `auth_request`, Caddy
 * `forward_auth`, Traefik `forwardAuth` and Envoy `ext_authz` ask it about a request and
 * carry the bytes themselves. It reads the forwarded request, asks the gate with the route
 * policy, and answers 200 with the identity headers, or exactly the refusal tokengate would
 * have sent the client.
 *
 * Why its own listener, not a path on the API port: the original method and URI arrive in
 * headers that only the proxy may set, so the port is bound to where only the proxy reaches
 * it; and the original path then keeps its own meaning on the request line (Envoy sends it
 * there), with no path of tokengate's to collide with.
 */
import type * as Http from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import type { GateRequest, Outcome } from '../auth/gate.ts'
import type { OpenedGate } from '../auth/open-gate.ts'
import { policyInForce } from '../auth/policy/reload.ts'
import type { Config } from '../config/schema.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { createAddressMatcher } from '../http/address-blocks.ts'
import { API_PREFIX, pathOf } from '../http/api-path.ts'
import { sendFailureResponse } from '../http/node-response.ts'
import { problemResponse } from '../http/problem-response.ts'
import { createRequestIdGenerator, requestIdOf } from '../http/request-id.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'
import {
  clientAddressOf,
  type ForwardedRequest,
  readForwardedRequest,
} from './forwarded-request.ts'

export interface BuildDecisionServerOptions {
  readonly config: Readonly<Config>
  /** The process's gate: the same limiter, counters and recorder as the API listener. */
  readonly gate: OpenedGate
  readonly logger: {
    info(fields: object, message: string): void
    error(fields: object, message: string): void
  }
}

export interface DecisionServer {
  /** Listens; resolves with `http://host:port`. */
  listen(host: string, port: number): Promise<string>
  close(): Promise<void>
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

/** Methods Node's HTTP parser knows; anything else is refused rather than guessed at. */
const KNOWN_METHODS = new Set(http.METHODS)
const EXACT_PREFIX = API_PREFIX
const PREFIX = `${API_PREFIX}/`

/**
 * Builds the decision listener (plain HTTP, not listening yet). Throws when the policy file is
 * invalid.
 */
export async function buildDecisionServer(
  options: BuildDecisionServerOptions,
): Promise<DecisionServer> {
  const { config, gate: opened, logger } = options
  const decision = config.decision as DecisionConfig
  const trusted = createAddressMatcher(decision.trustedProxies)
  const policy = await policyInForce(decision.policyFile ?? config.gateway?.policyFile, logger)
  const access = { policy: policy.matcher, identity: true }
  const nextRequestId = createRequestIdGenerator()
  const { gate, recorder } = opened

  const handle = (req: Http.IncomingMessage, res: Http.ServerResponse) => {
    const started = performance.now()
    const requestId = requestIdOf(req.headers['x-request-id'], nextRequestId)
    const stated = statedRequest(req, trusted(req.socket.remoteAddress), decision.pathPrefix)
    let outcome: Outcome | undefined
    if (recorder.recordsAnswers) {
      res.once('finish', () =>
        recorder.recordAnswer({
          listener: 'decision',
          method: stated.ok ? stated.method : (req.method ?? ''),
          target: stated.ok ? stated.url : (req.url ?? ''),
          requestId,
          status: res.statusCode,
          durationMs: performance.now() - started,
          outcome,
        }),
      )
    }
    req.resume()
    if (!stated.ok) {
      return sendFailureResponse(
        res,
        problemResponse('validation_failed', stated.reason, requestId),
        requestId,
      )
    }
    // A CORS preflight carries no credentials (Fetch standard): never checked, never counted.
    if (stated.method === 'OPTIONS' && isPreflight(req)) {
      res.writeHead(204, { 'x-request-id': requestId, 'content-length': '0' }).end()
      return
    }
    const path = pathOf(stated.url)
    if (!path.startsWith(PREFIX) && path !== EXACT_PREFIX) {
      const notFound = problemResponse('not_found', 'No such endpoint.', requestId)
      return sendFailureResponse(res, notFound, requestId)
    }
    const { authorization, tenantIds } = readAuthHeaders(req.rawHeaders)
    const request: GateRequest = {
      method: stated.method,
      target: stated.url,
      authorization,
      tenantIds,
      clientAddress: clientAddressOf(req, trusted),
      requestId,
      access,
    }
    const answer = (settled: Outcome) => {
      outcome = settled
      if (settled.allowed) {
        res.writeHead(200, {
          ...settled.headers,
          ...settled.identity,
          'x-request-id': requestId,
          'content-length': '0',
        })
        return void res.end()
      }
      // nginx drops the subrequest's body: the problem travels in a header it can return.
      const extra =
        stated.kind === 'nginx'
          ? { [PROBLEM_HEADER]: asciiJson(JSON.stringify(settled.body)) }
          : undefined
      sendFailureResponse(res, settled, requestId, extra)
    }
    const checked = gate.check(request)
    if (!isPromiseLike(checked)) return answer(checked)
    checked.then(answer, (error: unknown) => {
      logger.error({ err: error, reqId: requestId }, 'decision failed')
      const failed = problemResponse('internal_error', 'An unexpected error occurred.', requestId)
      sendFailureResponse(res, failed, requestId)
    })
  }

  const server = http.createServer(
    { maxHeaderSize: config.server.maxHeaderBytes, requestTimeout: config.server.requestTimeoutMs },
    handle,
  )
  return {
    listen: (host, port) =>
      new Promise((resolve, reject) => {
        server.once('error', reject)
        server.listen(port, host, () => {
          server.off('error', reject)
          const address = server.address() as AddressInfo
          const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address
          resolve(`http://${shown}:${address.port}`)
        })
      }),
    close: () =>
      new Promise<void>((resolve) => {
        policy.close()
        server.closeIdleConnections()
        server.close(() => resolve())
        if (!server.listening) resolve()
      }),
  }
}

/** The original request the proxy states, or why it cannot be decided. */
function statedRequest(
  req: Http.IncomingMessage,
  trustedPeer: boolean,
  pathPrefix: string,
): ForwardedRequest {
  const stated = readForwardedRequest(
    req.rawHeaders,
    { method: req.method ?? 'GET', url: req.url ?? '/' },
    { trusted: trustedPeer, pathPrefix },
  )
  return stated.ok && !KNOWN_METHODS.has(stated.method)
    ? { ok: false, kind: stated.kind, reason: 'the original method is not supported' }
    : stated
}

function isPreflight(req: Http.IncomingMessage): boolean {
  return (
    req.headers.origin !== undefined && req.headers['access-control-request-method'] !== undefined
  )
}

/** JSON with every non-ASCII character escaped (`\uXXXX`): the same value, header-safe. */
function asciiJson(json: string): string {
  return json.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}
