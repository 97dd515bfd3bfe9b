/**
 * The head of a relayed answer, written in one pass. What the caller gets is what Fastify's
 * `reply.headers(callerResponseHeaders(upstream))` then `writeHead(status,
 * reply.getHeaders())` gives: the reply's own headers (request id, rate limits: set by the
 * server's hooks), then the upstream's without hop-by-hop fields or its `X-Request-Id`, an
 * upstream field replacing the reply's of the same name except `Set-Cookie`, which is joined.
 * Why not that composition: it copies the upstream's headers into a map of their own, then
 * one by one into the reply's, then into the map written; this writes one flat list read from
 * the reply's own map (a proxied request's allocations, bench/gateway-gc.bench.ts). Field
 * names that are integers (`123`) keep their place; a map would have moved them first.
 */
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyReply } from 'fastify'
import { connectionListed, type HeaderMap, isRelayedResponseHeader } from './headers.ts'

/** Writes the status and headers of `reply` joined with the upstream's `upstream`. */
export function writeRelayedHead(reply: FastifyReply, upstream: HeaderMap): void {
  const res = reply.raw
  // Headers set on the raw response (`res.setHeader`) make Node merge the written head into
  // them field by field: that case keeps the public composition.
  const own = res.getHeaderNames().length === 0 ? replyHeaderMap(reply) : undefined
  if (own === undefined) {
    writeThroughGetHeaders(reply, upstream)
    return
  }
  const listed = connectionListed(upstream.connection)
  // A flat list: Node writes it as it is (no copy of the reply's map, no map of the head).
  const head: (string | string[] | number)[] = []
  for (const name in own) {
    if (!Object.hasOwn(own, name)) continue
    const mine = own[name] as string | string[] | number
    head.push(
      name,
      Object.hasOwn(upstream, name) && isRelayedResponseHeader(name, listed)
        ? joined(name, mine, upstream[name])
        : mine,
    )
  }
  for (const name in upstream) {
    if (Object.hasOwn(own, name) || !isRelayedResponseHeader(name, listed)) continue
    head.push(name, (upstream[name] ?? '') as string | string[] | number)
  }
  res.writeHead(res.statusCode, head as unknown as OutgoingHttpHeaders)
}

/** The public composition: `reply.getHeaders()` (raw headers, then the reply's) plus the upstream's. */
function writeThroughGetHeaders(reply: FastifyReply, upstream: HeaderMap): void {
  const head = reply.getHeaders() as HeaderMap
  const listed = connectionListed(upstream.connection)
  for (const name in upstream) {
    if (!isRelayedResponseHeader(name, listed)) continue
    head[name] = joined(name, head[name], upstream[name])
  }
  reply.raw.writeHead(reply.raw.statusCode, head as OutgoingHttpHeaders)
}

/** The upstream's value of a field the reply may have too: it wins, but `Set-Cookie` joins. */
function joined(name: string, own: HeaderMap[string], upstream: HeaderMap[string]) {
  const value = upstream ?? ''
  return name === 'set-cookie' && own !== undefined && own !== ''
    ? ([] as string[]).concat(own as string | string[], value as string | string[])
    : value
}

/**
 * Fastify's own map of a reply's headers: `reply.header` writes it, `reply.getHeaders()`
 * copies it twice per call (into a new object after the raw response's, itself a new
 * null-prototype object). Read through the symbol Fastify keeps it under, found once by its
 * description; a Fastify without it gets `writeThroughGetHeaders` (test/gateway/response-head.test.ts
 * fails if the pinned Fastify stops having it).
 */
export function replyHeaderMap(reply: FastifyReply): HeaderMap | undefined {
  if (replyHeadersKey === undefined) {
    replyHeadersKey =
      Object.getOwnPropertySymbols(reply).find((s) => s.description === 'fastify.reply.headers') ??
      null
  }
  if (replyHeadersKey === null) return undefined
  const map = (reply as unknown as Record<symbol, unknown>)[replyHeadersKey]
  return typeof map === 'object' && map !== null ? (map as HeaderMap) : undefined
}

let replyHeadersKey: symbol | null | undefined
