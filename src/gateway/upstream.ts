/**
 * The connection to the upstream: one undici keep-alive pool, and one exchange per proxied
 * request driven through undici's dispatcher API, with the response body handed over as a
 * plain `Readable` that streams with backpressure.
 *
 * Why not `@fastify/reply-from` (which tokengate used first, over the same undici pool):
 * profiled at 32 connections it spent more CPU per request than the rest of the proxy hop
 * (a header copy and a URL parse per request, a retry wrapper, undici's `request()` body
 * stream and its async-resource bookkeeping), for features the gateway does not use
 * (retries, load balancing, HTTP/2, body rewriting). Dispatching directly keeps the same
 * pool, the same streaming and the same timeouts at a fraction of the cost.
 */
import { Readable } from 'node:stream'
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

/** What the exchange reports: exactly one of `onResponse` or `onError` is called. */
export interface UpstreamCallbacks {
  /** The upstream's status and headers (lower-case names, repeats as arrays) and its body. */
  onResponse(statusCode: number, headers: HeaderMap, body: Readable): void
  /** The request failed before any response header arrived (connect, reset, timeout...). */
  onError(error: Error & { code?: string }): void
}

/** The handle of one exchange: abort it (the upstream connection is closed, not reused). */
export interface UpstreamExchange {
  abort(reason: Error): void
}

/**
 * Sends `request` over `pool`. Response body errors after the headers (a reset, a body
 * timeout) destroy the body stream with the error, which ends the caller's response early,
 * exactly as a broken connection should look to the caller.
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
  #body: UpstreamBody | null = null
  /** Set when aborted before undici handed over its controller. */
  #abortReason: Error | null = null

  constructor(callbacks: UpstreamCallbacks) {
    this.#callbacks = callbacks
  }

  abort(reason: Error): void {
    if (this.#body?.complete) return
    if (this.#controller) this.#controller.abort(reason)
    else this.#abortReason ??= reason
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
    const body = new UpstreamBody(controller)
    this.#body = body
    this.#callbacks.onResponse(statusCode, headers, body)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    // Backpressure: a caller that reads slowly pauses the upstream socket, so a large
    // download passes through with constant memory.
    if (this.#body && !this.#body.push(chunk)) controller.pause()
  }

  onResponseEnd(): void {
    if (!this.#body) return
    this.#body.complete = true
    this.#body.push(null)
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (this.#body) this.#body.destroy(error)
    else this.#callbacks.onError(error)
  }
}

/** The upstream's response body: reading resumes the upstream socket; destroying aborts it. */
class UpstreamBody extends Readable {
  readonly #controller: Dispatcher.DispatchController
  /** The upstream has sent the whole body (the exchange is over, whoever reads it). */
  complete = false

  constructor(controller: Dispatcher.DispatchController) {
    super()
    this.#controller = controller
  }

  override _read(): void {
    this.#controller.resume()
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    // Destroyed before its end (the caller went away, or the caller's response failed):
    // abort, so the half-read connection is closed instead of returned to the pool.
    if (!this.complete && !this.#controller.aborted) {
      this.#controller.abort(error ?? new Error('response body destroyed'))
    }
    callback(error)
  }
}
