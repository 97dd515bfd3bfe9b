/**
 * Header rewriting between the caller and the upstream: hop-by-hop headers (RFC 9110
 * §7.6.1) are dropped in both directions; towards the upstream, caller-supplied identity
 * headers are removed and the gateway's own are added.
 */
import { IDENTITY_HEADER_NAMES } from '../http/identity-headers.ts'
import { withoutOwnCookies } from '../http/own-cookies.ts'
import { isSpoofable } from '../http/spoofable-headers.ts'

/** Headers as Node and undici hand them over: lower-case names. */
export type HeaderMap = Record<string, string | string[] | number | undefined>

/**
 * RFC 9110 §7.6.1 hop-by-hop fields, plus the obsolete `Proxy-Connection` and `Keep-Alive`
 * that intermediaries still meet. Every `Proxy-*` field is dropped as well (below).
 * `Expect` is answered by Node itself (100-continue) and must not be repeated upstream.
 */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
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
   * `X-Forwarded-For`: the client address chain, furthest first, ending with the immediate
   * peer (`, `-separated): only the peer's address, unless the server trusts proxies in front of it.
   */
  readonly forwardedFor: string
  /** `http` or `https`, as the server saw the request (or a trusted proxy reported it). */
  readonly protocol: string
  /** The host the caller addressed. */
  readonly host: string
  /** Forwarding headers (lower-case) the caller may send through (`gateway.forwardHeaders`). */
  readonly forwardHeaders?: ReadonlySet<string> | undefined
  /** Send `X-Forwarded-Host` from the caller's `Host` (`gateway.forwardedHost`). */
  readonly forwardedHost?: boolean | undefined
  /** The upstream's `host` (and port), sent as `Host`. */
  readonly upstreamHost: string
}

/**
 * A request's header fields as undici takes them: name, value, name, value... (lower-case
 * names). Why not a map: undici copies a map into such a list anyway (`Object.keys`, then a
 * lookup per field), and a map of ~15 fields added one by one is a dictionary object.
 */
export type HeaderList = (string | string[])[]

/**
 * The headers sent upstream: the caller's, minus hop-by-hop fields, `Expect`, every
 * identity and forwarding/override field in any spelling (`isSpoofable`), tokengate's own
 * cookies, `Authorization` (when configured); plus the identity headers, `X-Request-Id` and `X-Forwarded-For/Proto`
 * (and `-Host` when configured), and `Host` = the upstream's. In the caller's order with the
 * gateway's fields after; a kept field the gateway sets (such as `X-Request-Id`, or `Host`)
 * keeps its place with the gateway's value. `incoming` is not changed.
 */
export function upstreamRequestHeaders(incoming: HeaderMap, context: ForwardContext): HeaderList {
  const listed = connectionListed(incoming.connection)
  const kinds = requestFieldKinds(context.forwardHeaders)
  const { identity } = context
  const names = Object.keys(incoming)
  // Sized once for the most it can hold, then cut to what was written: grown by `push`, the
  // list reallocated its backing store twice per request.
  const headers: HeaderList = new Array(
    2 * (names.length + IDENTITY_HEADER_NAMES.length + GATEWAY_SET.length),
  )
  let length = 0
  // The gateway's fields already written in the caller's place (one bit per kind).
  let placed = 0
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string
    let kind = kinds.get(name)
    if (kind === undefined) {
      kind = requestFieldKind(name, context.forwardHeaders)
      if (kinds.size < MAX_REMEMBERED_NAMES) kinds.set(name, kind)
    }
    if (kind === DROP || listed?.has(name) === true) continue
    let value: HeaderMap[string]
    if (kind === KEEP || (kind === FORWARDED_HOST && !context.forwardedHost)) {
      value = incoming[name]
    } else if (kind === AUTHORIZATION) {
      value = context.stripAuthorization ? undefined : incoming[name]
    } else if (kind === COOKIE) {
      // The admin console's session cookie is an operator credential (http/own-cookies.ts).
      value = withoutOwnCookies(String(incoming.cookie))
    } else {
      placed |= 1 << kind
      value = gatewayValue(kind, context)
    }
    if (value === undefined) continue
    headers[length++] = name
    headers[length++] = value as string | string[]
  }

  for (const name in identity) {
    if (!Object.hasOwn(identity, name)) continue
    headers[length++] = name
    headers[length++] = identity[name] as string
  }
  for (let i = 0; i < GATEWAY_SET.length; i++) {
    const [kind, name] = GATEWAY_SET[i] as readonly [FieldKind, string]
    if ((placed & (1 << kind)) !== 0) continue
    // Why opt-in: `Host` is whatever the caller typed; an upstream building absolute URLs
    // (password-reset links, redirects) from it would be steered by the caller.
    if (kind === FORWARDED_HOST && !context.forwardedHost) continue
    headers[length++] = name
    headers[length++] = gatewayValue(kind, context)
  }
  headers.length = length
  return headers
}

/** The value the gateway sets for a field of kind `kind` (one of `GATEWAY_SET`). */
function gatewayValue(kind: FieldKind, context: ForwardContext): string {
  switch (kind) {
    case REQUEST_ID:
      return context.requestId
    case FORWARDED_FOR:
      return context.forwardedFor
    case FORWARDED_PROTO:
      return context.protocol
    case FORWARDED_HOST:
      return context.host
    default:
      return context.upstreamHost
  }
}

const KEEP = 0
const DROP = 1
const AUTHORIZATION = 2
const COOKIE = 3
// The fields the gateway sets, in the order it adds them after the caller's.
const REQUEST_ID = 4
const FORWARDED_FOR = 5
const FORWARDED_PROTO = 6
const FORWARDED_HOST = 7
const HOST = 8
type FieldKind =
  | typeof KEEP
  | typeof DROP
  | typeof AUTHORIZATION
  | typeof COOKIE
  | typeof REQUEST_ID
  | typeof FORWARDED_FOR
  | typeof FORWARDED_PROTO
  | typeof FORWARDED_HOST
  | typeof HOST

/** The fields the gateway sets, in the order it adds them after the caller's. */
const GATEWAY_SET: readonly (readonly [FieldKind, string])[] = [
  [REQUEST_ID, 'x-request-id'],
  [FORWARDED_FOR, 'x-forwarded-for'],
  [FORWARDED_PROTO, 'x-forwarded-proto'],
  [FORWARDED_HOST, 'x-forwarded-host'],
  [HOST, 'host'],
]
const GATEWAY_SET_KINDS: ReadonlyMap<string, FieldKind> = new Map(
  GATEWAY_SET.map(([kind, name]) => [name, kind]),
)

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
  if (name === 'cookie') return COOKIE
  // A field the gateway sets (`Host`, `X-Request-Id`, a forwarding field the operator lets
  // through): the gateway's value in the caller's place.
  return GATEWAY_SET_KINDS.get(name) ?? KEEP
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
