/**
 * The connection to the upstream: one undici keep-alive pool, and one exchange per proxied
 * request driven through undici's dispatcher API, the response body handed over chunk by
 * chunk with backpressure (no stream object in between: the proxy writes each chunk to the
 * caller's response itself).
 *
 * Why not `@fastify/reply-from` (which tokengate used first, over the same undici pool):
 * profiled at 32 connections it spent more CPU per request than the rest of the proxy hop
 * (a header copy and a URL parse per request, a retry wrapper, undici's `request()` body
 * stream and its async-resource bookkeeping), for features the gateway does not use
 * (retries, load balancing, HTTP/2, body rewriting). Dispatching directly keeps the same
 * pool, the same streaming and the same timeouts at a fraction of the cost.
 */
import type { Readable } from 'node:stream'
import { type Dispatcher, Pool } from 'undici'
import type { HeaderMap } from './headers.ts'

export interface UpstreamPoolOptions {
  /** Bounds the connect attempt, the wait for response headers and each gap in the body. */
  readonly timeoutMs: number
  /** Connections to the upstream; default 128. */
  readonly connections?: number | undefined
}

/**
 * A keep-alive pool to `origin` (`http://host:port` or `https://...`): up to
 * `connections` (128), 60 s idle, no pipelining (a slow response must not hold up the next one).
 * Certificates of an https upstream are verified.
 */
export function createUpstreamPool(origin: string, options: UpstreamPoolOptions): Pool {
  return new Pool(origin, {
    connections: options.connections ?? 128,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    headersTimeout: options.timeoutMs,
    bodyTimeout: options.timeoutMs,
    // Why explicit: the identity headers are only as private as this connection; an https
    // upstream whose certificate is not verified could be impersonated by anyone on the path.
    connect: { timeout: options.timeoutMs, rejectUnauthorized: true },
  })
}

/** One request to the upstream: the rewritten headers and the caller's body, if any. */
export interface UpstreamRequest {
  readonly method: string
  /** Path and query, as sent on the request line. */
  readonly path: string
  readonly headers: HeaderMap
  /** The caller's request body, streamed as it arrives; `null` for none. */
  readonly body: Readable | null
}

/**
 * What the exchange reports: `onResponse` (then `onData`* and `onEnd`, or `onError`), or
 * `onError` alone when the request failed before any response header arrived.
 */
export interface UpstreamCallbacks {
  /** The upstream's status and headers (lower-case names, repeats as arrays). */
  onResponse(statusCode: number, headers: HeaderMap): void
  /** A chunk of the response body; `false` pauses the upstream until `resume()`. */
  onData(chunk: Buffer): boolean
  /** The whole response body has arrived. */
  onEnd(): void
  /**
   * The exchange failed: before the response head (connect, reset, timeout...) or, when
   * `onResponse` was called, in the body (a reset, a body timeout).
   */
  onError(error: Error & { code?: string }): void
}

/** The handle of one exchange. */
export interface UpstreamExchange {
  /** Aborts the exchange unless it is complete: the upstream connection is closed, not reused. */
  abort(reason: Error): void
  /** Resumes reading the response body after `onData` answered `false`. */
  resume(): void
  /** The upstream has sent the whole response (the connection went back to the pool). */
  readonly complete: boolean
}

/**
 * Sends `request` over `pool`. The body is relayed chunk by chunk with backpressure: a
 * caller that reads slowly pauses the upstream socket, so a large download passes through
 * with constant memory.
 */
export function sendUpstream(
  pool: Dispatcher,
  request: UpstreamRequest,
  callbacks: UpstreamCallbacks,
): UpstreamExchange {
  const handler = new ExchangeHandler(callbacks)
  pool.dispatch(
    {
      method: request.method as Dispatcher.HttpMethod,
      path: request.path,
      headers: request.headers as Record<string, string | string[] | undefined>,
      body: request.body,
    },
    handler,
  )
  return handler
}

class ExchangeHandler implements Dispatcher.DispatchHandler, UpstreamExchange {
  readonly #callbacks: UpstreamCallbacks
  #controller: Dispatcher.DispatchController | null = null
  /** Set when aborted before undici handed over its controller. */
  #abortReason: Error | null = null
  complete = false

  constructor(callbacks: UpstreamCallbacks) {
    this.#callbacks = callbacks
  }

  abort(reason: Error): void {
    if (this.complete) return
    if (this.#controller) {
      if (!this.#controller.aborted) this.#controller.abort(reason)
    } else {
      this.#abortReason ??= reason
    }
  }

  resume(): void {
    this.#controller?.resume()
  }

  // undici tells this handler style from its deprecated one by `onRequestStart`: keep it.
  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#abortReason) controller.abort(this.#abortReason)
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    this.#controller = controller
    this.#callbacks.onResponse(statusCode, headers)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.#callbacks.onData(chunk)) controller.pause()
  }

  onResponseEnd(): void {
    this.complete = true
    this.#callbacks.onEnd()
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.#callbacks.onError(error)
  }
}
