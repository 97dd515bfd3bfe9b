/**
 * Which proxy asks, and what that proxy can and cannot do for tokengate: the one header
 * family the decision listener believes from it, and how the answer covers what the shipped
 * example (examples/forward-auth/) cannot strip before the upstream sees it. One table, read
 * by the HTTP and the gRPC front ends (docs/forward-auth.md "What each proxy relays").
 *
 * Why one family per proxy, never "whichever is present": a proxy overwrites only the
 * headers it sets itself and passes the client's others on. Caddy and Traefik set
 * `X-Forwarded-Method/-Uri` and forward a client's `X-Original-*`; ingress-nginx sets
 * `X-Original-URL` and forwards a client's `X-Original-URI`. Believing any family but the
 * proxy's own lets the client state the request that is decided.
 */
import { BlockList, isIPv4 } from 'node:net'
import { PROXY_KINDS, type ProxyKind } from '../config/schema.ts'
import { equalsAsciiLowercase } from '../core/raw-headers.ts'
import { parseAddressBlock } from '../http/address-blocks.ts'
import { IDENTITY_HEADER_NAMES } from '../http/identity-headers.ts'
import { STEERING_HEADERS } from '../http/spoofable-headers.ts'

export { PROXY_KINDS, type ProxyKind } from '../config/schema.ts'

/** Where a proxy states the original request. */
export interface HeaderFamily {
  readonly method: string
  readonly uri: string
  /** The URI header holds an absolute URL (ingress-nginx's `X-Original-URL`). */
  readonly absolute: boolean
}

export interface ProxyRules {
  /** The one family believed; undefined: the request line (Envoy's HTTP ext_authz). */
  readonly family: HeaderFamily | undefined
  /**
   * Steering headers (`isSteering`) that may arrive on the decision request because the
   * proxy itself sets them or its example removes or overwrites them before the upstream, in
   * these exact lower-case names. Any other spelling a client sent reaches the upstream as
   * it is: the answer refuses the request, or (Envoy) names it for removal.
   */
  readonly overwritten: ReadonlySet<string>
  /**
   * What the answer does about a steering header the proxy passes on as it is: `refuse` the
   * request, or (Envoy, whose answer can remove request headers) `remove` every client
   * spelling the answer does not itself replace.
   */
  readonly passedOn: 'refuse' | 'remove'
  /**
   * The console's session cookie as the decision sees it: `refuse` the request (the proxy
   * cannot strip it, or strips it before asking, so what is left would pass on);
   * `refuse-repeated` (nginx: the example strips one occurrence after asking; a browser
   * never sends two); or `rewrite` the `Cookie` header in the answer (Envoy).
   */
  readonly adminCookie: 'refuse' | 'refuse-repeated' | 'rewrite'
  /**
   * Whether a CORS preflight on the decision listener's own request line is answered (204
   * and the CORS headers, as the API port answers it). Only where that answer cannot be
   * taken as "allowed": the example routes preflights to the decision listener as the
   * client's request (nginx, Caddy), or any answer but 200 is final (Envoy). Elsewhere a
   * preflight is decided like any request, so without a token it never reaches the upstream.
   */
  readonly answersPreflight: boolean
  /** nginx drops a refusal's body: it gets the problem in `X-Tokengate-Problem` too. */
  readonly problemHeader: boolean
  /**
   * Where this proxy reports its client's TLS certificate (forwarded-certificate.ts), as its
   * shipped example sets it, overwriting any copy a client sent under that name; undefined:
   * this proxy reports none. Read from this kind only: another proxy's header, or any from
   * a peer that is no trusted proxy, is never read.
   */
  readonly certificate: CertificateField | undefined
}

/** How a proxy encodes the client certificate (forwarded-certificate.ts). */
export type CertificateEncoding = 'escaped-pem' | 'der-base64' | 'escaped-pem-body'

export interface CertificateField {
  /** The header, lower-case; undefined: the gRPC CheckRequest's `source.certificate`. */
  readonly header: string | undefined
  readonly encoding: CertificateEncoding
  /** The value the proxy sends for "no certificate" besides an empty one. */
  readonly none?: string | undefined
}

/**
 * What every example sets or clears by name: the identity headers tokengate answers and the
 * steering headers (http/spoofable-headers.ts).
 */
const NAMED = new Set([...IDENTITY_HEADER_NAMES, ...STEERING_HEADERS])

const ORIGINAL: HeaderFamily = {
  method: 'x-original-method',
  uri: 'x-original-uri',
  absolute: false,
}
const FORWARDED: HeaderFamily = {
  method: 'x-forwarded-method',
  uri: 'x-forwarded-uri',
  absolute: false,
}

export const PROXY_RULES: Readonly<Record<ProxyKind, ProxyRules>> = {
  nginx: {
    family: ORIGINAL,
    overwritten: NAMED,
    passedOn: 'refuse',
    adminCookie: 'refuse-repeated',
    answersPreflight: true,
    problemHeader: true,
    // $ssl_client_escaped_cert, set by the example only when $ssl_client_verify is SUCCESS.
    certificate: { header: 'x-ssl-client-cert', encoding: 'escaped-pem' },
  },
  'ingress-nginx': {
    family: { method: 'x-original-method', uri: 'x-original-url', absolute: true },
    // ingress-nginx sets X-Auth-Request-Redirect on the auth subrequest itself.
    overwritten: new Set([...NAMED, 'x-auth-request-redirect']),
    passedOn: 'refuse',
    adminCookie: 'refuse',
    answersPreflight: false,
    problemHeader: true,
    certificate: undefined,
  },
  caddy: {
    family: FORWARDED,
    overwritten: NAMED,
    passedOn: 'refuse',
    adminCookie: 'refuse',
    answersPreflight: true,
    problemHeader: false,
    // {http.request.tls.client.certificate_der_base64}, set by the example's header_up; Caddy
    // sends a placeholder it cannot resolve (a plain-HTTP request has no TLS) as its text.
    certificate: {
      header: 'x-client-certificate',
      encoding: 'der-base64',
      none: '{http.request.tls.client.certificate_der_base64}',
    },
  },
  traefik: {
    family: FORWARDED,
    overwritten: NAMED,
    passedOn: 'refuse',
    adminCookie: 'refuse',
    answersPreflight: false,
    problemHeader: false,
    // passTLSClientCert (pem: true) removes a client's copy and sets its own.
    certificate: { header: 'x-forwarded-tls-client-cert', encoding: 'escaped-pem-body' },
  },
  envoy: {
    family: undefined,
    // Unused: every client spelling is named for removal, except the answer's own headers.
    overwritten: new Set(),
    passedOn: 'remove',
    adminCookie: 'rewrite',
    answersPreflight: true,
    problemHeader: false,
    // gRPC ext_authz with include_peer_certificate: attributes.source.certificate.
    certificate: { header: undefined, encoding: 'escaped-pem' },
  },
}

/** The proxy kind at an address, or undefined when it is not a trusted proxy. */
export type ProxyMatcher = (address: string | undefined) => ProxyKind | undefined

/**
 * Compiles `decision.trustedProxies` (`['127.0.0.1', '10.0.0.0/8=ingress-nginx']`), with
 * `decision.proxy` as the kind of entries that name none. The entries were checked when the
 * configuration was loaded (`trustedProxyProblems`); this throws only when two entries of
 * different kinds overlap: an address is one proxy.
 */
export function createProxyMatcher(decision: {
  readonly trustedProxies: readonly string[]
  readonly proxy?: ProxyKind | undefined
}): ProxyMatcher {
  const entries: { kind: ProxyKind; blocks: BlockList; address: string; type: Family }[] = []
  for (const text of decision.trustedProxies) {
    const { where, kind } = splitEntry(text, decision.proxy)
    const block = parseAddressBlock(where)
    if (!block || !kind) throw new Error(`decision.trustedProxies: unchecked entry "${text}"`)
    const blocks = new BlockList()
    if (block.prefix === undefined) blocks.addAddress(block.address, block.type)
    else blocks.addSubnet(block.address, block.prefix, block.type)
    entries.push({ kind, blocks, address: block.address, type: block.type })
  }
  for (const a of entries) {
    for (const b of entries) {
      // Two CIDR blocks overlap exactly when one holds the other's first address.
      if (a.kind !== b.kind && a.type === b.type && a.blocks.check(b.address, b.type)) {
        throw new Error(
          `decision.trustedProxies: ${b.address} is both ${a.kind} and ${b.kind}; an address is one proxy`,
        )
      }
    }
  }
  // The last address asked and its answer: each decision asks about its X-Forwarded-For hop,
  // usually the address the previous one asked about (BlockList.check builds an address object).
  let lastAddress: string | undefined
  let lastKind: ProxyKind | undefined
  return (address) => {
    if (!address) return undefined
    if (address === lastAddress) return lastKind
    // A dual-stack listener reports IPv4 peers as IPv4-mapped IPv6.
    const plain =
      address.startsWith('::ffff:') && isIPv4(address.slice(7)) ? address.slice(7) : address
    const type = isIPv4(plain) ? 'ipv4' : 'ipv6'
    let kind: ProxyKind | undefined
    for (const entry of entries) {
      if (entry.blocks.check(plain, type)) {
        kind = entry.kind
        break
      }
    }
    lastAddress = address
    lastKind = kind
    return kind
  }
}

type Family = 'ipv4' | 'ipv6'

/** An entry's address part and the proxy kind it stands for (its own, or the default). */
function splitEntry(
  text: string,
  fallback: ProxyKind | undefined,
): { where: string; kind: ProxyKind | undefined } {
  const [where = '', named] = text.split('=').map((part) => part.trim())
  const kind =
    named === undefined
      ? fallback
      : (PROXY_KINDS as readonly string[]).includes(named)
        ? (named as ProxyKind)
        : undefined
  return { where, kind }
}

/** Which proxy's header family arrived, on a request from a trusted `kind` that lacks its own. */
export interface FamilyMismatch {
  /** The headers `kind` sets, as the operator reads them. */
  readonly expected: string
  /** What arrived instead. */
  readonly arrived: string
  /** The proxy kinds that send what arrived. */
  readonly kinds: readonly ProxyKind[]
}

const SPELLED: readonly {
  readonly headers: string
  readonly uri: string
  readonly method: string
  readonly kinds: readonly ProxyKind[]
}[] = [
  {
    headers: 'X-Original-Method/-URI',
    uri: 'x-original-uri',
    method: 'x-original-method',
    kinds: ['nginx'],
  },
  {
    headers: 'X-Original-Method/-URL',
    uri: 'x-original-url',
    method: 'x-original-method',
    kinds: ['ingress-nginx'],
  },
  {
    headers: 'X-Forwarded-Method/-Uri',
    uri: 'x-forwarded-uri',
    method: 'x-forwarded-method',
    kinds: ['caddy', 'traefik'],
  },
]

/**
 * For the diagnostic line when the decision listener is set up for the wrong proxy: the
 * family that arrived instead of `kind`'s own (undefined when `kind`'s own is there). A
 * request with no family at all from a proxy that should send one looks like Envoy's HTTP
 * ext_authz (the request line only). Never used to decide: only to name the setting to fix.
 */
export function familyMismatch(
  kind: ProxyKind,
  rawHeaders: readonly string[],
): FamilyMismatch | undefined {
  const has = (name: string) => {
    for (let i = 0; i < rawHeaders.length; i += 2) {
      if (equalsAsciiLowercase(rawHeaders[i] as string, name)) return true
    }
    return false
  }
  const own = PROXY_RULES[kind].family
  // Every request of a well-configured proxy ends here: nothing else is built for it.
  if (own && has(own.uri)) return undefined
  const expected =
    SPELLED.find((s) => s.kinds.includes(kind))?.headers ??
    'the request line (no X-Original-*/X-Forwarded-Method headers)'
  const arrived = SPELLED.find((s) => !s.kinds.includes(kind) && has(s.uri) && has(s.method))
  if (arrived) return { expected, arrived: arrived.headers, kinds: arrived.kinds }
  if (own)
    return {
      expected,
      arrived: 'neither header family (a request line only, as Envoy sends)',
      kinds: ['envoy'],
    }
  return undefined
}
