/**
 * One forward-auth decision, free of any wire format: what the proxy asks (its kind, the
 * request line and headers it sent) in, a neutral answer out. The HTTP decision listener
 * (server.ts) and the Envoy gRPC ext_authz service (envoy-grpc.ts) both read their request
 * into an `AskedRequest`, call `decide`, and write the `Answer` their own way, so the same
 * request gets the same decision, status and problem body through either.
 *
 * Steps, in order: read the stated request from the kind's one header family; answer a CORS
 * preflight where the kind allows (proxy-kinds.ts); refuse paths outside /api/v1; refuse what
 * the proxy would pass to the upstream as identity (or, for Envoy, name it for removal); ask
 * the gate with the route policy; map its outcome.
 */
import { createRequire } from 'node:module'
import type { Allowed, Gate, GateRequest, Outcome, Refused } from '../auth/gate.ts'
import type { PolicyMatcher } from '../auth/policy/matcher.ts'
import type { PeerCertificate } from '../core/credential-kind.ts'
import { headerValues, readAuthHeaders, sumOverHeader } from '../core/raw-headers.ts'
import { API_PREFIX, pathOf } from '../http/api-path.ts'
import { type CorsSettings, isPreflight, preflightHeaders } from '../http/cors.ts'
import { countOwnCookies, withoutOwnCookies } from '../http/own-cookies.ts'
import { type FailureResponse, problemResponse } from '../http/problem-response.ts'
import { isSteering } from '../http/spoofable-headers.ts'
import { isPromiseLike, type MaybePromise } from '../lib/maybe-async.ts'
import { readForwardedCertificate } from './forwarded-certificate.ts'
import { createOriginReader, headerNames, readForwardedRequest } from './forwarded-request.ts'
import { PROXY_RULES, type ProxyKind, type ProxyRules } from './proxy-kinds.ts'

/** A request as the proxy asked about it, read from HTTP or from an Envoy CheckRequest. */
export interface AskedRequest {
  /** The proxy at the peer's address; undefined when the peer is no trusted proxy. */
  readonly kind: ProxyKind | undefined
  /** The decision request's own method and target (Envoy: the original request's). */
  readonly requestLine: { readonly method: string; readonly url: string }
  /** Removed from the request line's path first (`decision.pathPrefix`; gRPC: none). */
  readonly pathPrefix: string
  /** Every header as received, `[name, value, name, value, ...]`. */
  readonly rawHeaders: readonly string[]
  readonly clientAddress: string
  readonly requestId: string
  /** The decision request's own `Host`: the identity token's audience of last resort. */
  readonly host: string | undefined
  /** Envoy gRPC: the CheckRequest's `source.certificate` (URL-escaped PEM), if any. */
  readonly sourceCertificate?: string | undefined
}

export type Answer =
  | {
      readonly type: 'allow'
      readonly outcome: Allowed
      /** For the upstream request: the identity headers (and Envoy's `cookie` rewrite). */
      readonly upstream: Readonly<Record<string, string>>
      /** Envoy only: request headers to remove before the upstream sees them. */
      readonly remove: readonly string[]
      /** For the client's response: the RateLimit pair. */
      readonly client: Readonly<Record<string, string>>
      /** Decided with a client certificate, which a proxy's cache key does not hold. */
      readonly withCertificate?: boolean
    }
  | {
      readonly type: 'refuse'
      /** The gate's refusal; undefined for a request refused before it. */
      readonly outcome: Refused | undefined
      readonly response: FailureResponse
    }
  | { readonly type: 'preflight'; readonly headers: Readonly<Record<string, string>> }

export interface Decided {
  /** The original method and target, as decided (or the request line when unreadable). */
  readonly method: string
  readonly target: string
  readonly answer: MaybePromise<Answer>
}

export interface DeciderOptions {
  readonly gate: Gate
  readonly policy: PolicyMatcher
  readonly cors: CorsSettings
}

const require = createRequire(import.meta.url)
/** Methods Node's HTTP parser knows; anything else is refused rather than guessed at. */
const KNOWN_METHODS = new Set((require('node:http') as typeof import('node:http')).METHODS)
const PREFIX = `${API_PREFIX}/`

const PASSED_ON =
  'The request carries a header this proxy would pass to the upstream as it is: an X-Auth-*, method-override or URL-rewrite header in a spelling only tokengate may send.'
const SESSION_COOKIE_PASSED_ON =
  "The request carries the tokengate console's session cookie, which this proxy would pass to the upstream. Serve the console on another host name."
const SESSION_COOKIE_TWICE = "The request carries the tokengate console's session cookie twice."

export type Decider = (asked: AskedRequest) => Decided

export function createDecider(options: DeciderOptions): Decider {
  const { gate, policy, cors } = options
  // This decider's own memo of the origin its proxies state (not shared between listeners).
  const origins = createOriginReader()

  return (asked) => {
    const { kind, requestLine, rawHeaders, requestId, pathPrefix } = asked
    const stated = readForwardedRequest(rawHeaders, requestLine, { kind, pathPrefix, origins })
    if (!stated.ok) {
      return refused(
        requestLine.method,
        requestLine.url,
        'validation_failed',
        stated.reason,
        requestId,
      )
    }
    const { method, url: target } = stated
    if (!KNOWN_METHODS.has(method)) {
      return refused(method, target, 'validation_failed', UNKNOWN_METHOD, requestId)
    }
    const rules = kind === undefined ? undefined : PROXY_RULES[kind]

    // A CORS preflight carries no credentials (Fetch standard): answered, never checked, when
    // the answer reaches the client and cannot be taken for "allowed" (proxy-kinds.ts).
    if (
      (rules === undefined || rules.answersPreflight) &&
      requestLine.method === 'OPTIONS' &&
      method === 'OPTIONS'
    ) {
      const origin = first(rawHeaders, 'origin')
      if (isPreflight(method, origin, first(rawHeaders, ACRM))) {
        const answer: Answer = { type: 'preflight', headers: preflightHeaders(origin, cors) }
        return { method, target, answer }
      }
    }
    const path = pathOf(target)
    if (!path.startsWith(PREFIX) && path !== API_PREFIX) {
      return refused(method, target, 'not_found', 'No such endpoint.', requestId)
    }
    const shape = rules === undefined ? NO_CHANGES : headerShape(rawHeaders, rules)
    if ('refusal' in shape) {
      return refused(method, target, 'validation_failed', shape.refusal, requestId)
    }
    const forwarded = readForwardedCertificate(kind, rawHeaders, asked.sourceCertificate)
    if (!forwarded.ok) {
      return refused(method, target, 'validation_failed', forwarded.reason, requestId)
    }
    const peerCertificate: PeerCertificate | undefined = forwarded.certificate

    const { authorization, tenantIds } = readAuthHeaders(rawHeaders)
    const request: GateRequest = {
      method,
      target,
      authorization,
      tenantIds,
      clientAddress: asked.clientAddress,
      headers: rawHeaders,
      peerCertificate,
      requestId,
      access: {
        policy,
        identity: true,
        audience: stated.origin ?? (asked.host ? `http://${asked.host}` : undefined),
      },
    }
    const checked = gate.check(request)
    const answer = isPromiseLike(checked)
      ? Promise.resolve(checked).then((outcome) => answerFor(outcome, shape, peerCertificate))
      : answerFor(checked, shape, peerCertificate)
    return { method, target, answer }
  }
}

/** A request refused before the gate, with its problem body. */
function refused(
  method: string,
  target: string,
  code: 'validation_failed' | 'not_found',
  detail: string,
  requestId: string,
): Decided {
  const answer: Answer = {
    type: 'refuse',
    outcome: undefined,
    response: problemResponse(code, detail, requestId),
  }
  return { method, target, answer }
}

/** The gate's outcome as an answer, with what the proxy must change on the upstream request. */
function answerFor(
  outcome: Outcome,
  shape: HeaderShape,
  peerCertificate: PeerCertificate | undefined,
): Answer {
  if (!outcome.allowed) return { type: 'refuse', outcome, response: outcome }
  const identity = outcome.identity ?? {}
  return {
    type: 'allow',
    outcome,
    upstream: shape.cookie === undefined ? identity : { ...identity, cookie: shape.cookie },
    // A client's copy of a header the answer sets is replaced, not removed.
    remove:
      shape.remove.length === 0
        ? shape.remove
        : shape.remove.filter((n) => identity[n] === undefined),
    client: outcome.headers,
    ...(peerCertificate === undefined ? {} : { withCertificate: true }),
  }
}

const UNKNOWN_METHOD = 'the original method is not supported'
const ACRM = 'access-control-request-method'

interface HeaderShape {
  /** Envoy: headers to remove before the upstream. */
  readonly remove: readonly string[]
  /** Envoy: the `Cookie` header without tokengate's cookies. */
  readonly cookie?: string | undefined
}

const NO_CHANGES: HeaderShape = { remove: [] }

/**
 * What the proxy would hand the upstream that a client spelled: a steering header in a
 * spelling the proxy neither sets nor strips, or the console's session cookie. Refused, or,
 * where the answer can say so (Envoy), removed.
 */
function headerShape(
  rawHeaders: readonly string[],
  rules: ProxyRules,
): HeaderShape | { readonly refusal: string } {
  const own = sumOverHeader(rawHeaders, 'cookie', countOwnCookies)
  if (own > 1 && rules.adminCookie !== 'rewrite') return { refusal: SESSION_COOKIE_TWICE }
  if (own > 0 && rules.adminCookie === 'refuse') return { refusal: SESSION_COOKIE_PASSED_ON }
  const steering = headerNames(rawHeaders, isSteering)
  if (rules.passedOn === 'refuse') {
    // (The length first: no closure made for the usual empty list.)
    return steering.length > 0 && steering.some((name) => !rules.overwritten.has(name))
      ? { refusal: PASSED_ON }
      : NO_CHANGES
  }
  if (own === 0 || rules.adminCookie !== 'rewrite') return { remove: steering }
  // HTTP/2 may split Cookie into several fields; they are one list (RFC 9113 §8.2.3).
  const kept = withoutOwnCookies(headerValues(rawHeaders, 'cookie').join('; '))
  return kept === undefined
    ? { remove: [...steering, 'cookie'] }
    : { remove: steering, cookie: kept }
}

function first(rawHeaders: readonly string[], name: string): string | undefined {
  return headerValues(rawHeaders, name)[0]
}
