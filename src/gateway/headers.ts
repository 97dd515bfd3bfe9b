/**
 * Header rewriting between the caller and the upstream: hop-by-hop headers (RFC 9110
 * §7.6.1) are dropped in both directions; towards the upstream, caller-supplied identity
 * headers are removed and the gateway's own are added.
 */
import { IDENTITY_PREFIX } from '../http/identity-headers.ts'

/** Headers as Node and undici hand them over: lower-case names. */
export type HeaderMap = Record<string, string | string[] | number | undefined>

/**
 * RFC 9110 §7.6.1 hop-by-hop fields, plus the obsolete `Proxy-Connection` and `Keep-Alive`
 * that intermediaries still meet. Every `Proxy-*` field is dropped as well (below).
 * `Expect` is answered by Node itself (100-continue) and must not be repeated upstream.
 */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'proxy-connection',
])

/** Whether `name` (lower case) is a hop-by-hop field, by itself or listed in `Connection`. */
function isHopByHop(name: string, listed: ReadonlySet<string> | undefined): boolean {
  return HOP_BY_HOP.has(name) || name.startsWith('proxy-') || listed?.has(name) === true
}

/**
 * Headers a caller must never set for the upstream: they name the client, the URL or the
 * method on a proxy's word, and frameworks act on them (Symfony reads `X-Original-URL`,
 * Express' method-override reads `X-HTTP-Method-Override`, many apps trust `X-Real-IP`).
 * Every `X-Forwarded-*` field is one too (below).
 */
const FORWARDING = new Set([
  'forwarded',
  'x-real-ip',
  'true-client-ip',
  'x-client-ip',
  'cf-connecting-ip',
  'x-original-url',
  'x-rewrite-url',
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
])

/**
 * A header name as the upstream may read it: lower-cased, with `_` read as `-`. CGI, WSGI,
 * PHP and Rack expose headers as `HTTP_X_AUTH_TENANT`, so `X_Auth_Tenant` and
 * `X-Auth-Tenant` are one field there (and their values are joined).
 */
export function effectiveHeaderName(name: string): string {
  return name.toLowerCase().replaceAll('_', '-')
}

/**
 * Whether a caller's header is dropped on its way to the upstream: identity headers and
 * forwarding/override headers in any spelling, except a name the operator allows, and then
 * only in exactly that spelling. Identity headers are never allowed.
 */
export function isSpoofable(name: string, allowed: ReadonlySet<string> = NO_NAMES): boolean {
  const effective = effectiveHeaderName(name)
  if (effective.startsWith(IDENTITY_PREFIX)) return true
  if (!effective.startsWith('x-forwarded-') && !FORWARDING.has(effective)) return false
  return !allowed.has(name.toLowerCase())
}

const NO_NAMES: ReadonlySet<string> = new Set()

export interface ForwardContext {
  /** The gate's identity headers (`X-Auth-*`, and `X-Auth-Token` when signed). */
  readonly identity: Readonly<Record<string, string>>
  readonly requestId: string
  readonly stripAuthorization: boolean
  /**
   * The client address chain for `X-Forwarded-For`, furthest first, ending with the
   * immediate peer: only the peer's address, unless the server trusts proxies in front of it.
   */
  readonly forwardedFor: readonly string[]
  /** Whether the server trusts proxy headers in front of it (`server.trustProxy`). */
  readonly trustProxy: boolean
  /** `http` or `https`, as the server saw the request (or a trusted proxy reported it). */
  readonly protocol: string
  /** The host the caller addressed. */
  readonly host: string
  /** Forwarding headers (lower-case) the caller may send through (`gateway.forwardHeaders`). */
  readonly forwardHeaders?: ReadonlySet<string> | undefined
  /** Send `X-Forwarded-Host` from the caller's `Host` (`gateway.forwardedHost`). */
  readonly forwardedHost?: boolean | undefined
}

/**
 * The headers sent upstream: the caller's, minus hop-by-hop fields, `Expect`, every
 * identity and forwarding/override field in any spelling (`isSpoofable`), `Authorization`
 * (when configured); plus the identity headers, `X-Request-Id` and `X-Forwarded-For/Proto`
 * (and `-Host` when configured). A new map, in the caller's order with the gateway's fields
 * after (a kept field the gateway sets, such as `X-Request-Id`, keeps its place); `incoming`
 * is not changed.
 */
export function upstreamRequestHeaders(incoming: HeaderMap, context: ForwardContext): HeaderMap {
  const listed = connectionListed(incoming.connection)
  const headers: HeaderMap = {}
  for (const name of Object.keys(incoming)) {
    if (isHopByHop(name, listed)) continue
    if (name === 'expect' || (name === 'authorization' && context.stripAuthorization)) continue
    // Why every spelling: the upstream trusts these headers as the gateway's word, and an
    // upstream that reads `_` as `-` would join a caller's `X_Auth_Tenant` with ours.
    // Forwarding fields are dropped even behind a trusted proxy: tokengate states what it
    // (and the proxies it trusts) saw, below.
    if (isSpoofable(name, context.forwardHeaders)) continue
    headers[name] = incoming[name]
  }

  Object.assign(headers, context.identity)
  headers['x-request-id'] = context.requestId

  headers['x-forwarded-for'] = context.forwardedFor.join(', ')
  headers['x-forwarded-proto'] = context.protocol
  // Why opt-in: `Host` is whatever the caller typed; an upstream building absolute URLs
  // (password-reset links, redirects) from it would be steered by the caller.
  if (context.forwardedHost) headers['x-forwarded-host'] = context.host
  return headers
}

const LISTS_CLOSE: ReadonlySet<string> = new Set(['close'])

/** The lower-case field names a `Connection` header lists (they are hop-by-hop too). */
function connectionListed(connection: HeaderMap[string]): ReadonlySet<string> | undefined {
  if (connection === undefined) return undefined
  const listed = Array.isArray(connection) ? connection.join(',') : String(connection)
  // The usual values, without building a set per message.
  if (listed === 'keep-alive') return undefined
  if (listed === 'close') return LISTS_CLOSE
  const names = new Set<string>()
  for (const token of listed.split(',')) {
    const name = token.trim().toLowerCase()
    if (name) names.add(name)
  }
  return names
}

/**
 * The upstream's response headers as passed to the caller: hop-by-hop fields dropped, and
 * `X-Request-Id` left to the gateway (its id is the one in its logs). A new map.
 */
export function callerResponseHeaders(incoming: HeaderMap): HeaderMap {
  const listed = connectionListed(incoming.connection)
  const headers: HeaderMap = {}
  for (const name of Object.keys(incoming)) {
    if (isHopByHop(name, listed) || name === 'x-request-id') continue
    headers[name] = incoming[name]
  }
  return headers
}
