/**
 * The request a proxy asks about: which method and URI its client sent, read from the one
 * header family of the configured proxy kind (proxy-kinds.ts), and the origin the client
 * addressed (the identity token's default audience).
 */

import { equalsAsciiLowercase } from '../core/raw-headers.ts'
import type { ProxyKind, ProxyMatcher } from './proxy-kinds.ts'
import { PROXY_RULES } from './proxy-kinds.ts'

export type ForwardedRequest =
  | {
      readonly ok: true
      readonly method: string
      readonly url: string
      /** `scheme://host` the client addressed, when the proxy states it. */
      readonly origin: string | undefined
    }
  | { readonly ok: false; readonly reason: string }

const METHOD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$/
/** An origin-form request target: a path and an optional query, visible ASCII only. */
const ORIGIN_FORM = /^\/[\x21-\x7e]*$/
/** `http(s)://authority` of an absolute URL, the authority free of `/`, `?`, `#`, `@`. */
const ABSOLUTE = /^(https?):\/\/([^/?#@\s]*)/i
const HOST = /^[A-Za-z0-9.:[\]-]{1,255}$/
const PROTO = /^https?$/i

/**
 * Reads the original method and URI. `kind` is the proxy at the peer's address; undefined
 * when the peer is no trusted proxy, whose `X-Original-*` / `X-Forwarded-*` headers are then
 * ignored and the request line decides: a direct caller cannot make tokengate decide (or
 * audit, or count failures) for a request other than the one it made.
 *
 * Exactly the kind's family is read, whatever else is present (proxy-kinds.ts says why).
 * Fail closed: a family given half (a URI without its method) or twice, an invalid method or
 * a target that is not a plain path is refused rather than guessed at, because a guess (say
 * GET for an unknown method) could pass a request under a weaker rule.
 */
export function readForwardedRequest(
  rawHeaders: readonly string[],
  requestLine: { readonly method: string; readonly url: string },
  options: {
    readonly kind: ProxyKind | undefined
    readonly pathPrefix: string
    /** The decider's origin reader (its memo of the last reading); a plain read without. */
    readonly origins?: OriginReader | undefined
  },
): ForwardedRequest {
  const family = options.kind === undefined ? undefined : PROXY_RULES[options.kind].family
  const originOf = options.origins ?? readOrigin
  if (family === undefined) {
    const { url, method } = requestLine
    const prefix = options.pathPrefix
    if (prefix && !(url.startsWith(`${prefix}/`) || url === prefix)) {
      return { ok: false, reason: `the request path does not start with ${prefix}` }
    }
    const origin =
      options.kind === 'envoy'
        ? originOf(soleValue(rawHeaders, 'x-forwarded-proto'), soleValue(rawHeaders, 'host'))
        : undefined
    return checked(method, url.slice(prefix.length) || '/', origin)
  }
  const read = readFamily(rawHeaders, family.uri, family.method)
  const { uri, method } = read
  if (uri === undefined || method === undefined) {
    return { ok: false, reason: `send exactly one ${family.uri} and one ${family.method} header` }
  }
  if (!family.absolute) return checked(method, uri, originOf(read.proto, read.host))
  // `https://host/path?q` → `/path?q`, without URL parsing: a parser would resolve `..` and
  // re-encode characters, hiding from the policy the spelling the upstream will receive.
  const match = ABSOLUTE.exec(uri)
  const path = match ? uri.slice(match[0].length) : ''
  if (!match || !path.startsWith('/')) {
    return { ok: false, reason: `${family.uri} is not an absolute http(s) URL` }
  }
  const origin = originOf(match[1], match[2])
  return checked(method, path, origin)
}

function checked(method: string, url: string, origin: string | undefined): ForwardedRequest {
  if (!METHOD.test(method)) return { ok: false, reason: 'the original method is not a method' }
  if (!ORIGIN_FORM.test(url)) {
    return { ok: false, reason: 'the original URI is not a path with an optional query' }
  }
  return { ok: true, method: method.toUpperCase(), url, origin }
}

/** `scheme://host` from one proto and one host value (each sent once), when both are plausible. */
export type OriginReader = (
  proto: string | undefined,
  host: string | undefined,
) => string | undefined

function readOrigin(proto: string | undefined, host: string | undefined): string | undefined {
  if (!proto || !host) return undefined
  return PROTO.test(proto) && HOST.test(host)
    ? `${proto.toLowerCase()}://${host.toLowerCase()}`
    : undefined
}

/**
 * An origin reader that keeps its last reading: a proxy states the same origin for most
 * asks (two tests and a string saved). One per decider, so listeners share no memo.
 */
export function createOriginReader(): OriginReader {
  let last = { proto: '', host: '', origin: undefined as string | undefined }
  return (proto, host) => {
    if (!proto || !host) return undefined
    if (proto === last.proto && host === last.host) return last.origin
    const origin = readOrigin(proto, host)
    last = { proto, host, origin }
    return origin
  }
}

/** A family's URI and method, and X-Forwarded-Proto/-Host: each only when sent exactly once. */
interface FamilyRead {
  uri: string | undefined
  method: string | undefined
  proto: string | undefined
  host: string | undefined
}

/**
 * The four headers a proxy's statement is made of, in one pass over the list (not a scan
 * per header). A name sent twice reads as undefined, as `soleValue` reads it.
 */
function readFamily(
  rawHeaders: readonly string[],
  uriName: string,
  methodName: string,
): FamilyRead {
  const read: FamilyRead = { uri: undefined, method: undefined, proto: undefined, host: undefined }
  // Bit per header seen twice: its value is then no value at all.
  let repeated = 0
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    const value = rawHeaders[i + 1] as string
    if (equalsAsciiLowercase(name, uriName)) {
      if (read.uri !== undefined) repeated |= 1
      read.uri = value
    } else if (equalsAsciiLowercase(name, methodName)) {
      if (read.method !== undefined) repeated |= 2
      read.method = value
    } else if (equalsAsciiLowercase(name, 'x-forwarded-proto')) {
      if (read.proto !== undefined) repeated |= 4
      read.proto = value
    } else if (equalsAsciiLowercase(name, 'x-forwarded-host')) {
      if (read.host !== undefined) repeated |= 8
      read.host = value
    }
  }
  if (repeated & 1) read.uri = undefined
  if (repeated & 2) read.method = undefined
  if (repeated & 4) read.proto = undefined
  if (repeated & 8) read.host = undefined
  return read
}

/**
 * The value of a header sent exactly once; undefined when it is absent or repeated. No array
 * per lookup.
 */
export function soleValue(rawHeaders: readonly string[], name: string): string | undefined {
  let value: string | undefined
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (equalsAsciiLowercase(rawHeaders[i] as string, name)) {
      if (value !== undefined) return undefined
      value = rawHeaders[i + 1] as string
    }
  }
  return value
}

/**
 * Every header name (lower-case, once each) that `test` picks; `test` reads the name in any
 * spelling (isSteering does). Most requests have none: nothing is allocated for them.
 */
export function headerNames(
  rawHeaders: readonly string[],
  test: (name: string) => boolean,
): string[] {
  let names: Set<string> | undefined
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const raw = rawHeaders[i] as string
    if (!test(raw)) continue
    names ??= new Set()
    names.add(raw.toLowerCase())
  }
  return names ? [...names] : NONE
}

const NONE = Object.freeze([]) as unknown as string[]

/**
 * The client address a request stands for: the peer, or, when the peer is a trusted proxy,
 * the nearest address in `X-Forwarded-For` that is not itself a trusted proxy (proxy-addr's
 * rule, which Fastify applies to the API listener). Hand-written: a dozen lines, and the
 * decision listener needs no framework.
 */
export function clientAddressOf(
  req: {
    readonly socket: { readonly remoteAddress?: string | undefined }
    readonly headers: Record<string, string | string[] | undefined>
  },
  trusted: ProxyMatcher,
): string {
  const peer = req.socket.remoteAddress ?? ''
  const header = req.headers['x-forwarded-for']
  return clientAddressFrom(
    peer,
    trusted(peer) !== undefined,
    Array.isArray(header) ? header.join(',') : header,
    trusted,
  )
}

/**
 * `clientAddressOf` from what a binding has already read: the peer, whether it is a trusted
 * proxy, and its `X-Forwarded-For` (every field joined by commas).
 */
export function clientAddressFrom(
  peer: string,
  peerTrusted: boolean,
  forwardedFor: string | undefined,
  trusted: ProxyMatcher,
): string {
  let address = peer
  if (!peerTrusted || forwardedFor === undefined) return address
  // One hop (what nginx's `$proxy_add_x_forwarded_for` gives a direct client): it is the
  // address, trusted or not, as the walk below would find; no list is built for it.
  if (!forwardedFor.includes(',')) return forwardedFor.trim() || address
  const chain = forwardedFor.split(',')
  for (let i = chain.length - 1; i >= 0; i--) {
    const hop = (chain[i] as string).trim()
    if (hop === '') continue
    address = hop
    if (!trusted(hop)) break
  }
  return address
}
