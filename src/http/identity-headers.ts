/**
 * The identity headers tokengate hands an upstream for an allowed request (the gateway sends
 * them with the proxied request, the decision API answers them to the proxy): `X-Auth-Tenant`,
 * `-Subject`, `-Token-Type`, `-Token-Id` and `-Permissions`. Incoming headers of this family,
 * in any spelling, are removed before (gateway/headers.ts, docs/forward-auth.md).
 */
import type { Principal } from '../core/principal.ts'

/** Prefix of every identity header; any incoming one is removed. */
export const IDENTITY_PREFIX = 'x-auth-'

/** Every identity header tokengate may send: `identityHeaders` and the signed `X-Auth-Token`. */
export const IDENTITY_HEADER_NAMES: readonly string[] = [
  'x-auth-tenant',
  'x-auth-subject',
  'x-auth-token-type',
  'x-auth-token-id',
  'x-auth-permissions',
  'x-auth-token',
]

/**
 * The identity headers of a principal, lowercase names, values made header-safe. A frozen
 * object shared by every request of the same caller (see `remembered`): never change it.
 */
export function identityHeaders(principal: Principal): Readonly<Record<string, string>> {
  const key = principal.tokenId ?? principal.subject
  const entry = remembered.get(key)
  if (
    entry !== undefined &&
    entry.tenantId === principal.tenantId &&
    entry.subject === principal.subject &&
    entry.tokenType === principal.tokenType &&
    entry.tokenId === principal.tokenId &&
    entry.permissions === principal.permissions
  ) {
    return entry.headers
  }
  const headers = Object.freeze(buildIdentityHeaders(principal))
  if (entry !== undefined) remembered.delete(key)
  else if (remembered.size >= MAX_REMEMBERED) {
    const oldest = remembered.keys().next().value
    if (oldest !== undefined) remembered.delete(oldest)
  }
  remembered.set(key, {
    tenantId: principal.tenantId,
    subject: principal.subject,
    tokenType: principal.tokenType,
    tokenId: principal.tokenId,
    permissions: principal.permissions,
    headers,
  })
  return headers
}

/**
 * The last callers' headers (issue #36): a PAT's principal is built per request, and building
 * and encoding its five values was most of what the gateway's identity step allocated. Keyed
 * by token id (or subject); an entry answers only while every field it was built from is the
 * same (the permission list by identity: shared per cached token and per memoised JWT), so a
 * key changed or reused gets new headers. Bounded: the oldest entry makes room.
 */
const remembered = new Map<string, RememberedIdentity>()
const MAX_REMEMBERED = 1_024

interface RememberedIdentity {
  readonly tenantId: string
  readonly subject: string
  readonly tokenType: string
  readonly tokenId: string | undefined
  readonly permissions: readonly string[]
  readonly headers: Readonly<Record<string, string>>
}

function buildIdentityHeaders(principal: Principal): Record<string, string> {
  const headers: Record<string, string> = {
    'x-auth-tenant': encodeHeaderValue(principal.tenantId),
    'x-auth-subject': encodeHeaderValue(principal.subject),
    'x-auth-token-type': principal.tokenType,
  }
  if (principal.tokenId !== undefined) {
    headers['x-auth-token-id'] = encodeHeaderValue(principal.tokenId)
  }
  headers['x-auth-permissions'] = permissionsHeader(principal.permissions)
  return headers
}

/**
 * `X-Auth-Permissions` per permission list, joined and encoded once per list object: a PAT's
 * list is shared by every cached token with the same tenant and permissions, a JWT's by
 * its memoised principal, so a repeated caller costs one lookup. Lists are immutable.
 */
const permissionHeaders = new WeakMap<readonly string[], string>()

function permissionsHeader(permissions: readonly string[]): string {
  let header = permissionHeaders.get(permissions)
  if (header === undefined) {
    header = permissions.map(encodeListItem).join(',')
    permissionHeaders.set(permissions, header)
  }
  return header
}

/**
 * Makes an identity value safe and unambiguous as a header value: every character outside
 * visible ASCII, and `%` itself, is percent-encoded as UTF-8 (decode with
 * `decodeURIComponent`). Ordinary ids (`acme`, `user-1`, `tok_...`) pass unchanged.
 *
 * Why: a JWT `sub` is attacker-influenced JSON and may hold CR/LF or non-ASCII text; sent raw
 * it would be refused by the HTTP client or, worse, read differently by the upstream.
 */
export function encodeHeaderValue(value: string): string {
  return SAFE.test(value) ? value : value.replace(UNSAFE, encodeChar)
}

/** As `encodeHeaderValue`, and also `,` (the list separator of `X-Auth-Permissions`). */
function encodeListItem(value: string): string {
  return SAFE_ITEM.test(value) ? value : value.replace(UNSAFE_ITEM, encodeChar)
}

const SAFE = /^[\x21-\x24\x26-\x7e]*$/
const SAFE_ITEM = /^[\x21-\x24\x26-\x2b\x2d-\x7e]*$/
const UNSAFE = /[^\x21-\x24\x26-\x7e]/gu
const UNSAFE_ITEM = /[^\x21-\x24\x26-\x2b\x2d-\x7e]/gu

function encodeChar(char: string): string {
  // encodeURIComponent throws on a lone surrogate; U+FFFD keeps the value well-formed.
  return char.isWellFormed() ? encodeURIComponent(char) : '%EF%BF%BD'
}
