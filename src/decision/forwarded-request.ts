/**
 * The request a proxy asks about: which method and URI its client sent. Each proxy says it
 * its own way:
 * - nginx `auth_request`: `X-Original-Method`, `X-Original-URI`; ingress-nginx sends
 *   `X-Original-URL` (absolute) instead of the URI;
 * - Caddy `forward_auth`, Traefik `forwardAuth`: `X-Forwarded-Method`, `-Uri`, `-Host`;
 * - Envoy `ext_authz` (HTTP service): the original method and path on the request line,
 *   behind the configured `path_prefix`.
 */
import type { AddressMatcher } from '../http/address-blocks.ts'

export type ProxyKind = 'nginx' | 'forwarded' | 'request-line'

export type ForwardedRequest =
  | { readonly ok: true; readonly kind: ProxyKind; readonly method: string; readonly url: string }
  | { readonly ok: false; readonly reason: string; readonly kind?: ProxyKind }

const METHOD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$/
/** An origin-form request target: a path and an optional query, visible ASCII only. */
const ORIGIN_FORM = /^\/[\x21-\x7e]*$/

const FAMILIES = [
  { kind: 'nginx', method: 'x-original-method', uri: 'x-original-uri' },
  { kind: 'forwarded', method: 'x-forwarded-method', uri: 'x-forwarded-uri' },
] as const

/**
 * Reads the original method and URI. The `X-Original-*` / `X-Forwarded-*` headers are
 * believed only when `trusted` (the peer is a configured proxy): they are the proxy's
 * statement about its client, and anyone else sending them is making it up, so for other
 * callers they are ignored and the request line decides, as for Envoy.
 *
 * Fail closed: a family given half (a URI without its method) or twice, an invalid method
 * or a target that is not a plain path is refused rather than guessed at, because a guess
 * (say GET for an unknown method) could pass a request under a weaker rule.
 */
export function readForwardedRequest(
  rawHeaders: readonly string[],
  requestLine: { readonly method: string; readonly url: string },
  options: { readonly trusted: boolean; readonly pathPrefix: string },
): ForwardedRequest {
  if (options.trusted) {
    for (const family of FAMILIES) {
      let uris = headerValues(rawHeaders, family.uri)
      if (family.kind === 'nginx' && uris.length === 0) {
        uris = headerValues(rawHeaders, 'x-original-url').map(withoutOrigin)
      }
      const methods = headerValues(rawHeaders, family.method)
      if (uris.length === 0 && methods.length === 0) continue
      if (uris.length !== 1 || methods.length !== 1) {
        return {
          ok: false,
          kind: family.kind,
          reason: `send exactly one ${family.uri} and one ${family.method} header`,
        }
      }
      return checked(family.kind, methods[0] as string, uris[0] as string)
    }
  }
  const { url, method } = requestLine
  const prefix = options.pathPrefix
  if (prefix && !(url.startsWith(`${prefix}/`) || url === prefix)) {
    return { ok: false, reason: `the request path does not start with ${prefix}` }
  }
  return checked('request-line', method, url.slice(prefix.length) || '/')
}

function checked(kind: ProxyKind, method: string, url: string): ForwardedRequest {
  if (!METHOD.test(method)) {
    return { ok: false, kind, reason: 'the original method is not a method' }
  }
  if (!ORIGIN_FORM.test(url)) {
    return { ok: false, kind, reason: 'the original URI is not a path with an optional query' }
  }
  return { ok: true, kind, method: method.toUpperCase(), url }
}

/**
 * `https://host/path?q` → `/path?q`, without URL parsing: a parser would resolve `..` and
 * re-encode characters, hiding from the policy the spelling the upstream will receive.
 */
function withoutOrigin(url: string): string {
  const match = /^https?:\/\/[^/?#]*/i.exec(url)
  if (!match) return url
  const rest = url.slice(match[0].length)
  return rest.startsWith('/') ? rest : `/${rest}`
}

function headerValues(rawHeaders: readonly string[], name: string): string[] {
  const values: string[] = []
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if ((rawHeaders[i] as string).toLowerCase() === name) values.push(rawHeaders[i + 1] as string)
  }
  return values
}

/** Whether an address is one of the configured proxies (`decision.trustedProxies`). */
export type ProxyMatcher = AddressMatcher

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
  let address = req.socket.remoteAddress ?? ''
  if (!trusted(address)) return address
  const header = req.headers['x-forwarded-for']
  const chain = (Array.isArray(header) ? header.join(',') : (header ?? '')).split(',')
  for (let i = chain.length - 1; i >= 0; i--) {
    const hop = (chain[i] as string).trim()
    if (hop === '') continue
    address = hop
    if (!trusted(hop)) break
  }
  return address
}
