/**
 * The connection to the upstream: one undici keep-alive pool, dispatched to directly with
 * one handler object per proxied request (proxy.ts `RelayedExchange`), the response body
 * handed over chunk by chunk with backpressure (no stream object in between: the proxy
 * writes each chunk to the caller's response itself).
 *
 * Why not `@fastify/reply-from` (which tokengate used first, over the same undici pool):
 * profiled at 32 connections it spent more CPU per request than the rest of the proxy hop
 * (a header copy and a URL parse per request, a retry wrapper, undici's `request()` body
 * stream and its async-resource bookkeeping), for features the gateway does not use
 * (retries, load balancing, HTTP/2, body rewriting). Dispatching directly keeps the same
 * pool, the same streaming and the same timeouts at a fraction of the cost.
 */
import { Pool } from 'undici'

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
