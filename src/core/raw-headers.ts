import type { CredentialRequest } from './credential-kind.ts'

/**
 * The request authentication reads, with every header occurrence kept in arrival order.
 * Duplicates matter: two `Authorization` headers, or two `X-Tenant-Id` headers, are refused
 * rather than resolved, so the core must see all of them. A registered credential kind may
 * read any header (`headers`), the peer and the target.
 */
export interface AuthInput extends CredentialRequest {
  /**
   * Internal: the bearer token's SHA-256 already computed for this request (the server's
   * rate limiter keys its known-credentials set by it), so the token is hashed once, not
   * twice: it is a PAT's store key (`hashPat`) and a JWT's verified-token cache key. The core
   * uses it only for exactly this `token`; anything else is hashed as usual. It must be the
   * true digest of `token` (the server computes it from the same header), like any key.
   */
  readonly tokenSha256?: TokenDigest | undefined
}

/** A bearer token and its SHA-256 (lowercase hex), computed together. */
export interface TokenDigest {
  readonly token: string
  readonly sha256Hex: string
}

const AUTHORIZATION = 'authorization'
const TENANT_ID = 'x-tenant-id'

/**
 * Reads `Authorization` and `X-Tenant-Id` from Node's `req.rawHeaders` (a flat
 * `[name, value, name, value, ...]` list), matching names case-insensitively and keeping
 * every occurrence.
 *
 * Why raw headers: Node folds duplicates in `req.headers`; for `Authorization` the first
 * value silently wins and the others disappear, and `X-Tenant-Id` values are joined with
 * `", "`. Either would let a request carrying two credentials or two tenants look like a
 * request carrying one. Values are not trimmed (Node has already removed the optional
 * whitespace around field values that HTTP allows).
 *
 * @example
 * const input = readAuthHeaders(req.rawHeaders)
 * const result = await authenticate(input)
 */
export function readAuthHeaders(rawHeaders: readonly string[]): AuthInput {
  const authorization: string[] = []
  const tenantIds: string[] = []
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    const value = rawHeaders[i + 1] as string
    if (equalsAsciiLowercase(name, AUTHORIZATION)) authorization.push(value)
    else if (equalsAsciiLowercase(name, TENANT_ID)) tenantIds.push(value)
  }
  return { authorization, tenantIds }
}

/**
 * Every value of one header in a raw header list (`[name, value, ...]`), in arrival order;
 * `lowercaseName` is matched ASCII-case-insensitively. For a credential kind's own header.
 */
export function headerValues(
  rawHeaders: readonly string[] | undefined,
  lowercaseName: string,
): readonly string[] {
  const values: string[] = []
  if (rawHeaders === undefined) return values
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (equalsAsciiLowercase(rawHeaders[i] as string, lowercaseName)) {
      values.push(rawHeaders[i + 1] as string)
    }
  }
  return values
}

/**
 * `measure` summed over the values of every field named `lowercaseName`, without the list
 * `headerValues` makes: for a count asked of every request, where most carry no such field.
 */
export function sumOverHeader(
  rawHeaders: readonly string[],
  lowercaseName: string,
  measure: (value: string) => number,
): number {
  let sum = 0
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (equalsAsciiLowercase(rawHeaders[i] as string, lowercaseName)) {
      sum += measure(rawHeaders[i + 1] as string)
    }
  }
  return sum
}

/** A folded-header getter: Fetch `Headers#get`, Node `IncomingHttpHeaders`, Express `req.get`. */
export type HeaderGetter = (name: string) => string | readonly string[] | null | undefined

/**
 * Builds an `AuthInput` for frameworks that only expose folded headers (e.g. Fetch `Headers`
 * in Hono, where `headers.get(name)` joins duplicates with `", "`).
 *
 * Weaker guarantee than `readAuthHeaders`: duplicates may already have been merged or
 * dropped before this function sees them. Two `Authorization` headers joined as
 * `"Bearer a, Bearer b"` are still refused (a comma and a space are not b64token
 * characters), and two `X-Tenant-Id` values joined as `"t1, t2"` still fail the exact
 * comparison unless a tenant id itself contains `", "`. But a getter that keeps only the
 * first value (Node's `req.headers.authorization`) hides a second header entirely. Prefer
 * `readAuthHeaders(req.rawHeaders)` whenever raw headers are available.
 *
 * @param get Returns a header's value by lowercase name; `null`/`undefined` when absent.
 */
export function authInputFromHeaders(get: HeaderGetter): AuthInput {
  return { authorization: valuesOf(get(AUTHORIZATION)), tenantIds: valuesOf(get(TENANT_ID)) }
}

function valuesOf(value: string | readonly string[] | null | undefined): readonly string[] {
  if (value === null || value === undefined) return []
  return typeof value === 'string' ? [value] : [...value]
}

/**
 * ASCII-only case-insensitive comparison against a lowercase name. `String#toLowerCase` maps
 * exactly one UTF-16 unit onto an ASCII letter without changing the length (U+212A KELVIN
 * SIGN becomes `k`), so it is excluded: a header named with the look-alike is another header.
 * The native lower-casing measured as fast as a character loop, or faster (bench/README.md).
 */
export function equalsAsciiLowercase(name: string, lowercase: string): boolean {
  return (
    name.length === lowercase.length && name.toLowerCase() === lowercase && !name.includes('\u212a')
  )
}
