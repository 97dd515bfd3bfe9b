/**
 * Header rewriting between the caller and the upstream: hop-by-hop headers (RFC 9110
 * §7.6.1) are dropped in both directions; towards the upstream, caller-supplied identity
 * headers are removed and the gateway's own are added.
 */
import { withoutOwnCookies } from '../http/own-cookies.ts'
import { isSpoofable } from '../http/spoofable-headers.ts'

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
 * identity and forwarding/override field in any spelling (`isSpoofable`), tokengate's own
 * cookies, `Authorization` (when configured); plus the identity headers, `X-Request-Id` and `X-Forwarded-For/Proto`
 * (and `-Host` when configured). A new map, in the caller's order with the gateway's fields
 * after (a kept field the gateway sets, such as `X-Request-Id`, keeps its place); `incoming`
 * is not changed.
 */
export function upstreamRequestHeaders(incoming: HeaderMap, context: ForwardContext): HeaderMap {
  const listed = connectionListed(incoming.connection)
  const kinds = requestFieldKinds(context.forwardHeaders)
  const headers: HeaderMap = {}
  for (const name of Object.keys(incoming)) {
    let kind = kinds.get(name)
    if (kind === undefined) {
      kind = requestFieldKind(name, context.forwardHeaders)
      if (kinds.size < MAX_REMEMBERED_NAMES) kinds.set(name, kind)
    }
    if (kind === DROP || listed?.has(name) === true) continue
    if (kind === AUTHORIZATION && context.stripAuthorization) continue
    if (kind === COOKIE) {
      // The admin console's session cookie is an operator credential (http/own-cookies.ts).
      const kept = withoutOwnCookies(String(incoming.cookie))
      if (kept !== undefined) headers.cookie = kept
      continue
    }
    headers[name] = incoming[name]
  }

  Object.assign(headers, context.identity)
  headers['x-request-id'] = context.requestId

  headers['x-forwarded-for'] =
    context.forwardedFor.length === 1
      ? (context.forwardedFor[0] as string)
      : context.forwardedFor.join(', ')
  headers['x-forwarded-proto'] = context.protocol
  // Why opt-in: `Host` is whatever the caller typed; an upstream building absolute URLs
  // (password-reset links, redirects) from it would be steered by the caller.
  if (context.forwardedHost) headers['x-forwarded-host'] = context.host
  return headers
}

const KEEP = 0
const DROP = 1
const AUTHORIZATION = 2
const COOKIE = 3
type FieldKind = typeof KEEP | typeof DROP | typeof AUTHORIZATION | typeof COOKIE

/** What happens to a caller's field on its way upstream, apart from `Connection`'s list. */
function requestFieldKind(
  name: string,
  forwardHeaders: ReadonlySet<string> | undefined,
): FieldKind {
  if (isHopByHop(name, undefined) || name === 'expect') return DROP
  if (name === 'authorization') return AUTHORIZATION
  // Why every spelling: the upstream trusts these headers as the gateway's word, and an
  // upstream that reads `_` as `-` would join a caller's `X_Auth_Tenant` with ours.
  // Forwarding fields are dropped even behind a trusted proxy: tokengate states what it
  // (and the proxies it trusts) saw, above.
  if (isSpoofable(name, forwardHeaders)) return DROP
  return name === 'cookie' ? COOKIE : KEEP
}

/**
 * Each field name's kind, remembered per `forwardHeaders` set (one per gateway): a request's
 * names are the same few on every request, and classifying one (lower-casing, `_` to `-`,
 * five set lookups) cost more than the copy. Bounded, as callers choose the names: past
 * the bound a name is classified each time.
 */
const fieldKinds = new WeakMap<ReadonlySet<string>, Map<string, FieldKind>>()
const fieldKindsWithoutForwarding = new Map<string, FieldKind>()
const MAX_REMEMBERED_NAMES = 1_000

function requestFieldKinds(
  forwardHeaders: ReadonlySet<string> | undefined,
): Map<string, FieldKind> {
  if (forwardHeaders === undefined) return fieldKindsWithoutForwarding
  let kinds = fieldKinds.get(forwardHeaders)
  if (kinds === undefined) {
    kinds = new Map()
    fieldKinds.set(forwardHeaders, kinds)
  }
  return kinds
}

const LISTS_CLOSE: ReadonlySet<string> = new Set(['close'])

/** The lower-case field names a `Connection` header lists (they are hop-by-hop too). */
export function connectionListed(connection: HeaderMap[string]): ReadonlySet<string> | undefined {
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
    if (isRelayedResponseHeader(name, listed)) headers[name] = incoming[name]
  }
  return headers
}

/** Whether the upstream's response field `name` goes to the caller (`listed`: `connectionListed`). */
export function isRelayedResponseHeader(
  name: string,
  listed: ReadonlySet<string> | undefined,
): boolean {
  return !isHopByHop(name, listed) && name !== 'x-request-id'
}
