/**
 * Request headers a client must never hand an upstream: tokengate's identity headers, the
 * method-override and URL-rewrite headers frameworks route on, and the forwarding headers
 * that name the client. The one home of these rules: the gateway drops them, the decision
 * API refuses or removes what a proxy cannot (docs/forward-auth.md).
 */
import { IDENTITY_PREFIX } from './identity-headers.ts'

/**
 * Headers frameworks act on to change the method or the URL they route on: Symfony and IIS
 * read `X-Original-URL` / `X-Rewrite-URL`, Express' method-override and many others read
 * `X-HTTP-Method-Override`. A client's copy would re-route the request after it was decided.
 */
export const STEERING_HEADERS: readonly string[] = [
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
  'x-original-url',
  'x-rewrite-url',
]

const STEERING = new Set(STEERING_HEADERS)
/** The lower-case third letters of the steering names and of the identity prefix. */
const STEERING_THIRD = new Set([...STEERING_HEADERS, IDENTITY_PREFIX].map((n) => n.charCodeAt(2)))

/**
 * Headers that name the client on a proxy's word (apps trust `X-Real-IP`); every
 * `X-Forwarded-*` field is one too (below).
 */
const ADDRESSING = new Set([
  'forwarded',
  'x-real-ip',
  'true-client-ip',
  'x-client-ip',
  'cf-connecting-ip',
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
 * Whether a header, in any spelling, would tell the upstream who the caller is or which
 * method or URL to act on: an `X-Auth-*` identity header or a steering header. No operator
 * setting lets a client send one.
 */
export function isSteering(name: string): boolean {
  // Every such name starts with X (asked once per header of every decision request), then
  // `-` (or `_`), then one of a few letters: X-Forwarded-*, X-SSL-* and most others stop here.
  if ((name.charCodeAt(0) | 0x20) !== 0x78) return false
  const second = name.charCodeAt(1)
  if ((second !== 0x2d && second !== 0x5f) || !STEERING_THIRD.has(name.charCodeAt(2) | 0x20)) {
    return false
  }
  // Compared in place: lower-casing and `_` → `-` built two strings for each name let through.
  if (readsAs(name, IDENTITY_PREFIX)) return true
  for (const steering of STEERING_HEADERS) {
    if (name.length === steering.length && readsAs(name, steering)) return true
  }
  return false
}

/**
 * Whether `name` starts with `effective` (lower-case) as `effectiveHeaderName` reads it. ASCII
 * folding is enough: of the letters Unicode lower-cases into ASCII, the Kelvin sign's `k` is
 * in no name compared with, and `İ` gives `i` plus a combining dot, in none either.
 */
function readsAs(name: string, effective: string): boolean {
  if (name.length < effective.length) return false
  for (let i = 0; i < effective.length; i++) {
    let c = name.charCodeAt(i)
    if (c === 0x5f) c = 0x2d
    else if (c >= 0x41 && c <= 0x5a) c |= 0x20
    if (c !== effective.charCodeAt(i)) return false
  }
  return true
}

/**
 * Whether a caller's header is dropped on its way to the upstream: identity headers and
 * forwarding/override headers in any spelling, except a name the operator allows, and then
 * only in exactly that spelling. Identity headers are never allowed.
 */
export function isSpoofable(name: string, allowed: ReadonlySet<string> = NO_NAMES): boolean {
  const effective = effectiveHeaderName(name)
  if (effective.startsWith(IDENTITY_PREFIX)) return true
  if (
    !effective.startsWith('x-forwarded-') &&
    !STEERING.has(effective) &&
    !ADDRESSING.has(effective)
  ) {
    return false
  }
  return !allowed.has(name.toLowerCase())
}

const NO_NAMES: ReadonlySet<string> = new Set()
