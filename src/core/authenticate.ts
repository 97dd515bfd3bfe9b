import { Buffer } from 'node:buffer'
import { timingSafeEqual } from 'node:crypto'
import { type MaybePromise, thenMaybe } from '../lib/maybe-async.ts'
import { parseAuthorization } from './credentials.ts'
import type { AuthFailure } from './failure.ts'
import { jwtFingerprint, patFingerprint } from './fingerprint.ts'
import { checkPatFormat, hashPat, isPatToken, patLast4, patStatus } from './pat.ts'
import type {
  AuthLookups,
  Clock,
  JwtOutcome,
  JwtVerifier,
  PatRecord,
  Tenant,
  VerifiedJwt,
} from './ports.ts'
import type { AuthResult, Principal } from './principal.ts'
import type { AuthInput } from './raw-headers.ts'

/** Authenticates one request's headers: a `Principal`, or the first failing rule. */
export type Authenticate = (input: AuthInput) => Promise<AuthResult>

/**
 * `Authenticate` that answers without a promise when nothing had to wait: a rejection
 * decided from the header alone, or a PAT and its tenant found in a synchronous (cached)
 * lookup. Callers must accept both a value and a promise.
 */
export type AuthenticateMaybeSync = (input: AuthInput) => AuthResult | Promise<AuthResult>

export interface AuthenticatorDeps {
  readonly lookups: AuthLookups
  readonly jwt: JwtVerifier
  readonly clock: Clock
}

/** Seconds a client should wait before retrying when the store is unreachable. */
export const STORE_RETRY_AFTER_SECONDS = 5

/**
 * Builds the authentication pipeline (DESIGN "Authentication, precisely" rules 1–6):
 *
 * 1. `parseAuthorization`: missing or malformed header;
 * 2. classify: `pat_` prefix → PAT path, anything else → JWT path;
 * 3. PAT: `checkPatFormat` (no store access) → `findPatByHash` → revoked → expired →
 *    tenant exists and is enabled → optional `X-Tenant-Id` equals the PAT's tenant;
 * 4. JWT: `jwt.verify` → `X-Tenant-Id` required and equal to the tenant claim → tenant
 *    exists and is enabled;
 * 5. the `Principal`.
 *
 * Permissions are checked afterwards with `authorize`, so every 401 is decided before a 403.
 * The returned function never rejects for a bad request: a store that throws becomes
 * `unavailable` (503, fail closed). It rejects only if `jwt.verify` breaks its own contract.
 *
 * @example
 * const authenticate = createAuthenticator({ lookups: store, jwt: verifier, clock: systemClock })
 * const result = await authenticate(readAuthHeaders(req.rawHeaders))
 */
export function createAuthenticator(deps: AuthenticatorDeps): Authenticate {
  const authenticate = createMaybeSyncAuthenticator(deps)
  // The same pipeline, reachable by `maybeSyncOf` (bench/README.md "Speed measures and why").
  return Object.assign(async (input: AuthInput) => authenticate(input), {
    [MAYBE_SYNC]: authenticate,
  })
}

const MAYBE_SYNC = Symbol('tokengate.maybeSyncAuthenticate')

/**
 * The maybe-synchronous pipeline behind an `Authenticate` made by `createAuthenticator`, or
 * the function itself. Why: tokengatePlugin accepts either kind, and calling the pipeline
 * directly spares an application using the public factory a promise and a microtask turn per
 * request; a wrapped or hand-written function is called as given.
 */
export function maybeSyncOf(authenticate: AuthenticateMaybeSync): AuthenticateMaybeSync {
  return (authenticate as { [MAYBE_SYNC]?: AuthenticateMaybeSync })[MAYBE_SYNC] ?? authenticate
}

/**
 * The same pipeline as `createAuthenticator`, returning a value instead of a promise when
 * no step had to wait (see `AuthenticateMaybeSync`). The server uses it. The rules and their
 * order are those of the asynchronous form. Why: bench/README.md "Speed measures and why".
 *
 * @example
 * const result = authenticate(input)
 * const settled = isPromiseLike(result) ? await result : result
 */
export function createMaybeSyncAuthenticator(deps: AuthenticatorDeps): AuthenticateMaybeSync {
  const { lookups, jwt, clock } = deps
  const principals: PrincipalMemo = new WeakMap()
  return function authenticate(input: AuthInput): AuthResult | Promise<AuthResult> {
    const parsed = parseAuthorization(input.authorization)
    if (!parsed.ok) return parsed
    return isPatToken(parsed.token)
      ? authenticatePat(parsed.token, input, lookups, clock)
      : authenticateJwt(
          parsed.token,
          digestHint(input, parsed.token),
          input.tenantIds,
          lookups,
          jwt,
          principals,
        )
  }
}

export { isPromiseLike } from '../lib/maybe-async.ts'

function authenticatePat(
  token: string,
  input: AuthInput,
  lookups: AuthLookups,
  clock: Clock,
): AuthResult | Promise<AuthResult> {
  const tenantIds = input.tenantIds
  const format = checkPatFormat(token)
  if (!format.ok) {
    return fail({
      code: 'invalid_token',
      reason: format.reason,
      detail: 'The personal access token is malformed (wrong length, characters or checksum).',
    })
  }

  // The limiter's SHA-256 of this very token (bench/README.md "Speed measures and why").
  const tokenHash = digestHint(input, token) ?? hashPat(token)
  let found: MaybePromise<PatRecord | undefined>
  try {
    found = lookups.findPatByHash(tokenHash)
  } catch {
    return fail(storeUnavailable())
  }
  return thenMaybe(
    found,
    (record) => checkPat(token, tokenHash, record, tenantIds, lookups, clock),
    () => fail(storeUnavailable()),
  )
}

function checkPat(
  token: string,
  tokenHash: string,
  record: PatRecord | undefined,
  tenantIds: readonly string[],
  lookups: AuthLookups,
  clock: Clock,
): AuthResult | Promise<AuthResult> {
  // Why re-check the hash: a store bug (a case-insensitive collation, a wrong index) must not
  // turn one token into another tenant's credential. The check costs one string comparison.
  if (record === undefined || record.tokenHash !== tokenHash) return fail(unknown())
  const recordFailure = checkPatRecord(record, clock.now())
  if (recordFailure !== undefined) return fail(recordFailure)

  return afterTenantCheck(checkTenantActive(lookups, record.tenantId), () => {
    const headerFailure = checkOptionalTenantHeader(tenantIds, record.tenantId)
    if (headerFailure !== undefined) return fail(headerFailure)

    return { ok: true, principal: patPrincipal(record, token) }
  })
}

/**
 * A PAT's principal, built per request. Not memoised per cached record as a JWT's is: that
 * measured ~190 bytes a cached token (19 MB with 100,000 cached, against the memory target)
 * to save a fraction of a microsecond.
 */
function patPrincipal(record: PatRecord, token: string): Principal {
  return Object.freeze({
    tokenType: 'pat',
    tenantId: record.tenantId,
    subject: record.subject,
    permissions: record.permissions,
    tokenId: record.id,
    expiresAt: record.expiresAt,
    fingerprint: patFingerprint(patLast4(token)),
  } satisfies Principal)
}

/** The request's precomputed SHA-256 of exactly this token (`AuthInput.tokenSha256`), if any. */
function digestHint(input: AuthInput, token: string): string | undefined {
  const hint = input.tokenSha256
  return hint !== undefined && hint.token === token ? hint.sha256Hex : undefined
}

function authenticateJwt(
  token: string,
  sha256Hex: string | undefined,
  tenantIds: readonly string[],
  lookups: AuthLookups,
  verifier: JwtVerifier,
  principals: PrincipalMemo,
): AuthResult | Promise<AuthResult> {
  let outcome: JwtOutcome | Promise<JwtOutcome>
  try {
    outcome = verifier.verifyMaybeSync
      ? verifier.verifyMaybeSync(token, sha256Hex)
      : verifier.verify(token)
  } catch (error) {
    // A verifier bug rejects the request; it never passes it.
    return Promise.reject(error)
  }
  return thenMaybe(outcome, afterVerify)

  function afterVerify(outcome: JwtOutcome): AuthResult | Promise<AuthResult> {
    if (!outcome.ok) return fail(outcome.failure)
    const verified: VerifiedJwt = outcome.jwt

    const headerFailure = checkRequiredTenantHeader(tenantIds, verified.tenantId)
    if (headerFailure !== undefined) return fail(headerFailure)

    return afterTenantCheck(checkTenantActive(lookups, verified.tenantId), () => ({
      ok: true,
      principal: jwtPrincipal(verified, principals),
    }))
  }
}

/**
 * The principal of a verified JWT, built once per `VerifiedJwt` (bench/README.md "Speed
 * measures and why"); the tenant check that can change is made per request, above.
 */
function jwtPrincipal(verified: VerifiedJwt, principals: PrincipalMemo): Principal {
  let principal = principals.get(verified)
  if (principal === undefined) {
    principal = Object.freeze({
      tokenType: 'jwt',
      tenantId: verified.tenantId,
      subject: verified.subject,
      permissions: verified.permissions,
      tokenId: verified.tokenId,
      expiresAt: verified.expiresAt,
      issuer: verified.issuer,
      fingerprint: jwtFingerprint(verified.issuer, verified.keyId, verified.subject),
    } satisfies Principal)
    principals.set(verified, principal)
  }
  return principal
}

/** Per authenticator, so that two instances (tests, library users) share no state. */
type PrincipalMemo = WeakMap<VerifiedJwt, Principal>

/** Fails with the tenant check's failure, or continues with `next` (without a hop when sync). */
function afterTenantCheck(
  check: AuthFailure | undefined | Promise<AuthFailure | undefined>,
  next: () => AuthResult,
): AuthResult | Promise<AuthResult> {
  return thenMaybe(check, (failure) => (failure ? fail(failure) : next()))
}

/**
 * Revoked, rotated-out and expired PATs. Revoked shares the unknown token's client-facing
 * detail: telling a caller that a token *was* valid once helps whoever holds a list of
 * leaked strings; the precise `reason` still reaches the log.
 *
 * Rotation: a rotated-out token works until `graceUntil` (the operator's grace period, so
 * deployments can switch over), then fails with reason `rotated` and its `tokenId`. It is
 * checked before expiry on purpose: presenting a replaced token after its grace is the
 * signal that it leaked (GitLab's reuse detection), and the server answers it by revoking
 * the whole rotation family. The core only decides; the revocation is the caller's effect.
 */
function checkPatRecord(record: PatRecord, now: number): AuthFailure | undefined {
  switch (patStatus(record, now)) {
    case 'revoked':
      return { code: 'invalid_token', reason: 'revoked', detail: INVALID_TOKEN_DETAIL }
    case 'rotated':
      return {
        code: 'invalid_token',
        reason: 'rotated',
        detail: INVALID_TOKEN_DETAIL,
        tokenId: record.id,
      }
    case 'expired':
      return { code: 'token_expired', detail: 'The access token has expired.' }
    default:
      return undefined
  }
}

/** The tenant must exist and be enabled; a store failure fails closed (503). */
function checkTenantActive(
  lookups: AuthLookups,
  tenantId: string,
): AuthFailure | undefined | Promise<AuthFailure | undefined> {
  let found: MaybePromise<Tenant | undefined>
  try {
    found = lookups.findTenant(tenantId)
  } catch {
    return storeUnavailable()
  }
  return thenMaybe(found, tenantFailure, storeUnavailable)
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
function checkOptionalTenantHeader(
  tenantIds: readonly string[],
  tenantId: string,
): AuthFailure | undefined {
  if (tenantIds.length === 0) return undefined
  return checkRequiredTenantHeader(tenantIds, tenantId)
}

/** JWT (SPEC §5.3 rule 1, DESIGN rule 6): exactly one `X-Tenant-Id`, exactly equal. */
function checkRequiredTenantHeader(
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
 * nothing and removes any question of a timing oracle on the tenant of a stolen token.
 * The length check up front does leak the length, which is harmless for a non-secret.
 * UTF-16 code units are compared, so the result is exactly `a === b` for every JS string
 * (a UTF-8 encoding would map distinct lone surrogates to the same U+FFFD bytes).
 */
export function sameTenantId(a: string, b: string): boolean {
  if (a.length !== b.length) return false
  return timingSafeEqual(Buffer.from(a, 'utf16le'), Buffer.from(b, 'utf16le'))
}

const INVALID_TOKEN_DETAIL = 'The access token is not valid.'
const TENANT_INACTIVE_DETAIL = "The token's tenant is unknown or disabled."

function unknown(): AuthFailure {
  return { code: 'invalid_token', reason: 'unknown_token', detail: INVALID_TOKEN_DETAIL }
}

function storeUnavailable(): AuthFailure {
  return { code: 'unavailable', dependency: 'store', retryAfterSeconds: STORE_RETRY_AFTER_SECONDS }
}

function fail(failure: AuthFailure): AuthResult {
  return { ok: false, failure }
}
