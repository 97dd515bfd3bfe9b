/**
 * The head of a relayed answer, written in one pass. What the caller gets is what Fastify's
 * `reply.headers(callerResponseHeaders(upstream))` then `writeHead(status,
 * reply.getHeaders())` gives: the reply's own headers (request id, rate limits: set by the
 * server's hooks), then the upstream's without hop-by-hop fields or its `X-Request-Id`, an
 * upstream field replacing the reply's of the same name except `Set-Cookie`, which is joined.
 * Why not that composition: it copies the upstream's headers into a map of their own, then
 * one by one into the reply's, then into the map written; this builds the written map once
 * (a proxied request's allocations, bench/gateway-gc.bench.ts).
 */
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyReply } from 'fastify'
import { connectionListed, type HeaderMap, isRelayedResponseHeader } from './headers.ts'

/** Writes the status and headers of `reply` joined with the upstream's `upstream`. */
export function writeRelayedHead(reply: FastifyReply, upstream: HeaderMap): void {
  const head = reply.getHeaders() as HeaderMap
  const listed = connectionListed(upstream.connection)
  for (const name in upstream) {
    if (!isRelayedResponseHeader(name, listed)) continue
    const value = upstream[name] ?? ''
    const own = head[name]
    head[name] =
      name === 'set-cookie' && own !== undefined && own !== ''
        ? ([] as string[]).concat(own as string | string[], value as string | string[])
        : value
  }
  reply.raw.writeHead(reply.raw.statusCode, head as OutgoingHttpHeaders)
}
