import { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Dispatcher } from 'undici'
import { sendRecordedProblem } from '../auth/edge-fastify.ts'
import { problemResponse, sendProblemResponse } from '../http/problem-response.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'
import type { Admission, UpstreamAdmission } from './admission.ts'
import { type DeadlineEntry, Deadlines } from './deadlines.ts'
import { callerResponseHeaders, type HeaderMap, upstreamRequestHeaders } from './headers.ts'
import { writeRelayedHead } from './response-head.ts'
import { paceUpload, type UploadPaceOptions, UploadTooSlowError } from './upload-pace.ts'

export interface ProxyOptions {
  /** Upstream path prefix prepended to the request path (`''` for none). */
  readonly basePath: string
  /** Time allowed for the upstream's response headers, and between body chunks. */
  readonly timeoutMs: number
  readonly stripAuthorization: boolean
  /** Forwarding headers (lower-case) the caller may send through; all others are dropped. */
  readonly forwardHeaders?: ReadonlySet<string> | undefined
  /** Send `X-Forwarded-Host` from the caller's `Host`. */
  readonly forwardedHost?: boolean | undefined
  /** Per-token/per-tenant caps and the wait for a connection (`createUpstreamAdmission`). */
  readonly admission: UpstreamAdmission
  /** The minimum pace of a proxied request body. */
  readonly uploadPace: UploadPaceOptions
  /** The keep-alive pool to the upstream (`createUpstreamPool`). */
  readonly pool: Dispatcher
  /** The upstream URL: its `host` is sent as `Host`; its path is `basePath`. */
  readonly upstream: URL
}

const DETAIL = {
  badGateway: 'The upstream service could not be reached or sent an invalid response.',
  timeout: 'The upstream service did not answer in time.',
  tokenBusy:
    'This token has too many requests in flight to the upstream; retry when one completes.',
  tenantBusy:
    'This tenant has too many requests in flight to the upstream; retry when one completes.',
  busy: 'The upstream service has no free connection; retry shortly.',
  slowBody: 'The request body arrived too slowly.',
} as const

/**
 * The catch-all handler of gateway mode. The gate has already decided the request in
 * `onRequest` with the route policy (401, 429, 400 ambiguous path, 404 denied, 403), so
 * what is left is the upstream's: admission (per-token and per-tenant caps, a free
 * connection), then the exchange with the rewritten headers, the body streamed both ways,
 * and a 502/504 problem when the upstream fails or is late.
 */
export function createProxyHandler(options: ProxyOptions) {
  // Our own deadline, not only undici's: undici rounds timeouts above one second to its
  // coarse timer tick, and the caller is promised an answer within `timeoutMs`. One timer
  // for every exchange in flight (deadlines.ts), not one per request.
  const proxy: ProxyContext = { options, deadlines: new Deadlines(options.timeoutMs) }
  // Synchronous, returning nothing: Fastify then waits for the reply without a promise, and
  // an async handler's returned reply would cost another end-of-stream watcher per request.
  return function handleProxied(request: FastifyRequest, reply: FastifyReply): void {
    const outcome = request.outcome
    // Fail closed: reaching the proxy without the gate's allowance is a wiring bug, never a pass.
    if (!outcome?.allowed || outcome.identity === undefined) {
      throw new Error('bug: gateway route reached without an allowed outcome')
    }
    const { principal, identity } = outcome
    const admitted = options.admission.admit(
      principal.tenantId,
      principal.tokenId ?? principal.fingerprint,
    )
    if (!isPromiseLike(admitted)) {
      admit(proxy, request, reply, identity, admitted)
      return
    }
    admitted.then(
      (admission) => admit(proxy, request, reply, identity, admission),
      (error: unknown) => reply.send(error),
    )
  }
}

/** What every exchange of one gateway shares. */
interface ProxyContext {
  readonly options: ProxyOptions
  readonly deadlines: Deadlines
}

function admit(
  proxy: ProxyContext,
  request: FastifyRequest,
  reply: FastifyReply,
  identity: Readonly<Record<string, string>>,
  admission: Admission,
): void {
  if (!admission.ok) return void sendNotAdmitted(request, reply, admission.reason)
  if (reply.raw.destroyed) {
    // The caller left while waiting for a connection: nothing to send upstream.
    admission.release()
    return
  }
  new RelayedExchange(proxy, request, reply, admission).start(identity)
}

/** The exchange relaying a caller's response, on the response object (see `onCallerClose`). */
const EXCHANGE = Symbol('tokengate.gateway.exchange')

type CallerResponse = FastifyReply['raw'] & { [EXCHANGE]?: RelayedExchange }

/**
 * The response's end (or the caller leaving) ends the exchange and frees its slot. One
 * function for every response (`this` is the response), so a request adds no closure.
 */
function onCallerClose(this: CallerResponse): void {
  this[EXCHANGE]?.callerClosed()
}

/**
 * One upstream exchange, its answer relayed to the caller: undici's handler, the deadline's
 * entry and the state between them in one object per request (issue #36: the closures,
 * callback object, handler and timer it replaces were ~1.3 KB a request).
 *
 * The status and headers go through the reply (so the headers the server's hooks set stay,
 * and the upstream's win as `reply.header` has them), and are written with the first body
 * chunk, as Fastify sends a stream; the body chunks are written to the caller's response as
 * they arrive, with backpressure: a caller that reads slowly pauses the upstream socket.
 */
class RelayedExchange implements Dispatcher.DispatchHandler, DeadlineEntry {
  deadlineAt = 0
  deadlinePrevious: DeadlineEntry | null = null
  deadlineNext: DeadlineEntry | null = null
  deadlineQueued = false
  /** The caller's answer is decided: the upstream's head came, or a problem was sent. */
  settled = false
  /** The response head came and is being relayed (not dropped). */
  relaying = false
  /** The head has been written to the caller (with the first body chunk, or at the end). */
  headWritten = false
  /** The upstream has sent the whole response (the connection went back to the pool). */
  complete = false
  controller: Dispatcher.DispatchController | null = null
  /** Set when aborted before undici handed over its controller. */
  abortReason: Error | null = null
  /** The upstream's headers, held until the head is written. */
  upstreamHeaders: HeaderMap = NO_HEADERS
  readonly proxy: ProxyContext
  readonly request: FastifyRequest
  readonly reply: FastifyReply
  readonly admission: Admission & { ok: true }
  readonly requestId: string
  readonly res: CallerResponse

  constructor(
    proxy: ProxyContext,
    request: FastifyRequest,
    reply: FastifyReply,
    admission: Admission & { ok: true },
  ) {
    this.proxy = proxy
    this.request = request
    this.reply = reply
    this.admission = admission
    this.requestId = String(request.id)
    this.res = reply.raw
  }

  start(identity: Readonly<Record<string, string>>): void {
    const { request, res } = this
    const { options } = this.proxy
    this.proxy.deadlines.add(this)
    res[EXCHANGE] = this
    res.on('close', onCallerClose)
    const headers = upstreamRequestHeaders(request.headers as HeaderMap, {
      identity,
      requestId: this.requestId,
      stripAuthorization: options.stripAuthorization,
      // Fastify defines `ips` only when `trustProxy` is on: it is then the trusted chain,
      // nearest first, stopping at the first untrusted address.
      forwardedFor: request.ips ? request.ips.toReversed().join(', ') : (request.ip ?? 'unknown'),
      protocol: request.protocol,
      // Read only when sent: `request.host` parses the Host header (and trusted proxies').
      host: options.forwardedHost ? request.host : '',
      forwardHeaders: options.forwardHeaders,
      forwardedHost: options.forwardedHost,
      upstreamHost: options.upstream.host,
    })
    // The body parser of the gateway's scope hands over the raw request stream; requests
    // without a body (GET, or no length and no chunks) have none.
    const body =
      request.body instanceof Readable ? paceUpload(request.body, options.uploadPace) : null
    options.pool.dispatch(
      {
        method: request.method as Dispatcher.HttpMethod,
        path: upstreamPath(options, request.url),
        // A flat list is one of undici's header forms (typed as `string[]`; arrays as values
        // are accepted as in a map: a repeated field).
        headers: headers as string[],
        body,
      },
      this,
    )
  }

  /** Aborts the exchange unless it is complete: the upstream connection is closed, not reused. */
  abort(reason: Error): void {
    if (this.complete) return
    if (this.controller) {
      if (!this.controller.aborted) this.controller.abort(reason)
    } else {
      this.abortReason ??= reason
    }
  }

  /** The caller's response closed: finished, or the caller left (then mid-body is aborted). */
  callerClosed(): void {
    this.res[EXCHANGE] = undefined
    this.admission.release()
    this.proxy.deadlines.remove(this)
    // A caller who leaves during the body aborts it, so the half-read connection is closed
    // instead of returned to the pool.
    if (this.relaying) this.abort(new Error('response body destroyed'))
  }

  onDeadline(): void {
    if (this.settled) return
    this.settled = true
    this.abort(new Error('gateway timeout'))
    this.request.log.warn({ timeoutMs: this.proxy.options.timeoutMs }, 'upstream timed out')
    sendProblemResponse(
      this.reply,
      problemResponse('gateway_timeout', DETAIL.timeout, this.requestId),
    )
  }

  // undici tells this handler style from its deprecated one by `onRequestStart`: keep it.
  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller
    if (this.abortReason) controller.abort(this.abortReason)
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    responseHeaders: Record<string, string | string[] | undefined>,
  ): void {
    this.controller = controller
    const { reply, res } = this
    if (this.settled) {
      // Too late: the caller already has its 504. Release the upstream connection.
      this.abort(new Error('response body destroyed'))
      return
    }
    this.settled = true
    this.proxy.deadlines.remove(this)
    if (res.destroyed) {
      // The caller went away while the upstream was answering.
      this.abort(new Error('response body destroyed'))
      return
    }
    try {
      reply.code(statusCode)
    } catch {
      this.abort(new Error('response body destroyed'))
      this.request.log.warn({ statusCode }, 'upstream sent an invalid status code')
      sendProblemResponse(reply, problemResponse('bad_gateway', DETAIL.badGateway, this.requestId))
      return
    }
    this.upstreamHeaders = responseHeaders
    // An HTTP/1 connection cannot be reused until its request body has been read; the
    // upstream answered before that, so the caller's connection is closed after this.
    if (!this.request.raw.complete) reply.header('connection', 'close')
    if (statusCode === 204) {
      // No content: no body headers either (RFC 9110 §8.6), and nothing to relay.
      reply
        .headers(callerResponseHeaders(responseHeaders))
        .removeHeader('content-type')
        .removeHeader('content-length')
      reply.send()
      return
    }
    this.relaying = true
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.relaying) return
    if (!this.headWritten) this.writeHead()
    if (this.res.write(chunk)) return
    controller.pause()
    this.res.once('drain', () => this.controller?.resume())
  }

  onResponseEnd(): void {
    this.complete = true
    if (!this.relaying) return
    this.relaying = false
    if (!this.headWritten) this.writeHead()
    this.res.end()
  }

  onResponseError(
    _controller: Dispatcher.DispatchController,
    error: Error & { code?: string },
  ): void {
    const { request, reply, requestId } = this
    if (this.relaying) {
      this.relaying = false
      // The body failed after its head: a caller that has the head sees the response
      // cut short, as a broken connection should look.
      if (this.headWritten || request.raw.aborted) {
        request.log.warn({ code: error.code }, 'upstream response body failed: cut')
        this.res.destroy()
        return
      }
      // Nothing sent yet: a 502 like any upstream failure, without the upstream's
      // headers (they were held back) and without the error's text.
      request.log.warn({ code: error.code }, 'upstream failed')
      return void sendProblemResponse(
        reply,
        problemResponse('bad_gateway', DETAIL.badGateway, requestId),
      )
    }
    if (this.settled) return
    this.settled = true
    this.proxy.deadlines.remove(this)
    // Why a fixed detail: upstream error messages name hosts, ports and internals; they
    // go to the log, the caller gets a stable problem body.
    if (error instanceof UploadTooSlowError) {
      request.log.info('request body too slow: cut')
      // The rest of the body is never read: the connection cannot carry another request.
      reply.header('connection', 'close')
      return void sendProblemResponse(
        reply,
        problemResponse('request_timeout', DETAIL.slowBody, requestId),
      )
    }
    request.log.warn({ code: error.code }, 'upstream failed')
    sendProblemResponse(
      reply,
      error.code === 'UND_ERR_HEADERS_TIMEOUT'
        ? problemResponse('gateway_timeout', DETAIL.timeout, requestId)
        : problemResponse('bad_gateway', DETAIL.badGateway, requestId),
    )
  }

  writeHead(): void {
    this.headWritten = true
    writeRelayedHead(this.reply, this.upstreamHeaders)
  }
}

const NO_HEADERS: HeaderMap = {}

/**
 * The request line's target at the upstream: the upstream's path prefix, the caller's path,
 * the caller's query unchanged. Ordinary paths are used as they are; a path with characters
 * a URL parser would percent-encode (or a dot segment, already refused by the policy) is
 * passed through WHATWG URL resolution, so the upstream receives a well-formed target.
 */
function upstreamPath(options: ProxyOptions, url: string): string {
  const q = url.indexOf('?')
  const path = options.basePath + (q === -1 ? url : url.slice(0, q))
  const query = q === -1 ? '' : url.slice(q)
  if (PLAIN_PATH.test(path)) return path + query
  return new URL(path, options.upstream.origin).pathname + query
}

/**
 * Visible ASCII except what WHATWG URL parsing rewrites in a path (double quote, `#`, `<`,
 * `>`, `?`, `^`, backquote, braces, backslash), and no segment starting with `.` or `%2e`.
 */
const PLAIN_PATH = /^(?!.*\/(?:\.|%2e))[\x21\x24-\x3b\x3d\x40-\x5b\x5d\x5f\x61-\x7a\x7c\x7e]*$/i

/**
 * Over a token's or tenant's cap: 429, the caller's own load (as Envoy's local rate limit
 * answers). No connection in time: 503, the upstream's capacity. Both retry after a second.
 */
function sendNotAdmitted(
  request: FastifyRequest,
  reply: FastifyReply,
  reason: 'token' | 'tenant' | 'busy',
): FastifyReply {
  const requestId = String(request.id)
  const headers = { 'retry-after': '1' }
  return sendRecordedProblem(
    request,
    reply,
    reason === 'busy'
      ? problemResponse('unavailable', DETAIL.busy, requestId, { headers })
      : problemResponse('rate_limited', DETAIL[`${reason}Busy`], requestId, { headers }),
  )
}
