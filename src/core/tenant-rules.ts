/**
 * The tenant rules both credential kinds apply (DESIGN rules 4 and 6): the tenant must exist
 * and be enabled, and `X-Tenant-Id` must name it exactly.
 */
import { isPromiseLike, type MaybePromise } from '../lib/maybe-async.ts'
import type { AuthFailure } from './failure.ts'
import type { AuthLookups, Tenant } from './ports.ts'
import type { AuthResult } from './principal.ts'

/** Seconds a client should wait before retrying when the store is unreachable. */
export const STORE_RETRY_AFTER_SECONDS = 5

export const INVALID_TOKEN_DETAIL = 'The access token is not valid.'
const TENANT_INACTIVE_DETAIL = "The token's tenant is unknown or disabled."

/** The tenant must exist and be enabled; a store failure fails closed (503). */
export function checkTenantActive(
  lookups: AuthLookups,
  tenantId: string,
): AuthFailure | undefined | Promise<AuthFailure | undefined> {
  let found: MaybePromise<Tenant | undefined>
  try {
    found = lookups.findTenant(tenantId)
  } catch {
    return storeUnavailable()
  }
  // A branch, not `thenMaybe`: its callback call site is shared by every caller, so V8 calls
  // `tenantFailure` through it without inlining, on every authenticated request.
  return isPromiseLike(found)
    ? Promise.resolve(found).then(tenantFailure, storeUnavailable)
    : tenantFailure(found)
}

function tenantFailure(tenant: Tenant | undefined): AuthFailure | undefined {
  if (tenant === undefined) {
    return { code: 'invalid_token', reason: 'tenant_unknown', detail: TENANT_INACTIVE_DETAIL }
  }
  if (!tenant.enabled) {
    return { code: 'invalid_token', reason: 'tenant_disabled', detail: TENANT_INACTIVE_DETAIL }
  }
  return undefined
}

/**
 * PAT (DESIGN rule 4): `X-Tenant-Id` is optional, but a caller who names a tenant must get
 * that tenant or nothing; naming it twice is refused rather than resolved.
 */
export function checkOptionalTenantHeader(
  tenantIds: readonly string[],
  tenantId: string,
): AuthFailure | undefined {
  if (tenantIds.length === 0) return undefined
  return checkRequiredTenantHeader(tenantIds, tenantId)
}

/** JWT (SPEC §5.3 rule 1, DESIGN rule 6): exactly one `X-Tenant-Id`, exactly equal. */
export function checkRequiredTenantHeader(
  tenantIds: readonly string[],
  tenantId: string,
): AuthFailure | undefined {
  if (tenantIds.length === 0) return { code: 'tenant_header_required' }
  if (tenantIds.length > 1) {
    return { code: 'tenant_mismatch', detail: 'Send at most one X-Tenant-Id header.' }
  }
  if (!sameTenantId(tenantIds[0] as string, tenantId)) {
    return { code: 'tenant_mismatch', detail: "X-Tenant-Id does not match the token's tenant." }
  }
  return undefined
}

/**
 * Exact, case-sensitive equality with no trimming or normalisation (DESIGN rule 6).
 *
 * Why constant-time: tenant ids are not secrets, but comparing in constant time costs
 * little and removes any question of a timing oracle on the tenant of a stolen token.
 * The length check up front does leak the length, which is harmless for a non-secret.
 * UTF-16 code units are compared, so the result is exactly `a === b` for every JS string.
 * Every unit is read and the differences OR-ed, with no early exit: the same guarantee as
 * `timingSafeEqual`, without the two Buffers it needs (~200 ns on every JWT request).
 */
export function sameTenantId(a: string, b: string): boolean {
  if (a.length !== b.length) return false
  let difference = 0
  for (let i = 0; i < a.length; i++) difference |= a.charCodeAt(i) ^ b.charCodeAt(i)
  return difference === 0
}

export function storeUnavailable(): AuthFailure {
  return { code: 'unavailable', dependency: 'store', retryAfterSeconds: STORE_RETRY_AFTER_SECONDS }
}

export function fail(failure: AuthFailure): AuthResult {
  return { ok: false, failure }
}
