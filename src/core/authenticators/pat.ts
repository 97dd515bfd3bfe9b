/**
 * Personal Access Tokens (DESIGN rule 4): format and checksum before any store access, one
 * lookup by SHA-256, then revoked → rotated → expired → tenant → optional `X-Tenant-Id`.
 */
import { BoundedMemo, digestPlace } from '../../lib/bounded-memo.ts'
import { isPromiseLike, type MaybePromise } from '../../lib/maybe-async.ts'
import { checkCertificateBinding, thumbprintDigest } from '../certificate-binding.ts'
import type {
  Authenticator,
  CredentialContext,
  CredentialKind,
  PeerCertificate,
} from '../credential-kind.ts'
import type { AuthFailure } from '../failure.ts'
import { checkedPatFingerprint, hmacFingerprint, patFingerprint } from '../fingerprint.ts'
import { checkPatFormat, hashPat, isPatToken, patLast4, patStatus } from '../pat.ts'
import type { AuthLookups, Clock, KeyLimits, PatRecord } from '../ports.ts'
import type { AuthResult, Principal } from '../principal.ts'
import {
  checkOptionalTenantHeader,
  checkTenantActive,
  fail,
  INVALID_TOKEN_DETAIL,
  storeUnavailable,
} from '../tenant-rules.ts'

/** The PAT kind: `Authorization: Bearer pat_…`, looked up by hash in the store. */
export const patKind: CredentialKind = {
  name: 'pat',
  create: createPatAuthenticator,
  fingerprint: (token, sha256Hex) =>
    checkPatFormat(token).ok ? patFingerprint(patLast4(token)) : hmacFingerprint(token, sha256Hex),
  limiterKey: (principal) => `pat:${principal.tokenId ?? principal.fingerprint}`,
  storedKeyId: (principal) => principal.tokenId,
}

export function createPatAuthenticator(deps: {
  readonly lookups: AuthLookups
  readonly clock: Clock
}): Authenticator {
  const { lookups, clock } = deps
  return {
    kind: 'pat',
    claim: (_request, bearer) => (bearer !== undefined && isPatToken(bearer) ? bearer : undefined),
    authenticate(token, context) {
      const format = checkPatFormat(token)
      if (!format.ok) {
        return fail({
          code: 'invalid_token',
          reason: format.reason,
          detail: 'The personal access token is malformed (wrong length, characters or checksum).',
        })
      }
      const tokenHash = context.sha256Hex ?? hashPat(token)
      let found: MaybePromise<PatRecord | undefined>
      try {
        found = lookups.findPatByHash(tokenHash)
      } catch {
        return fail(storeUnavailable())
      }
      // A synchronous lookup (a cached record, an in-memory map) goes straight on: no
      // closure per request (nor, in `checkPatLater`, a context V8 would allocate here).
      if (!isPromiseLike(found)) {
        return checkPat(token, tokenHash, found, context.tenantIds, lookups, clock, context.request)
      }
      return checkPatLater(found, token, tokenHash, context, lookups, clock)
    },
  }
}

function checkPat(
  token: string,
  tokenHash: string,
  record: PatRecord | undefined,
  tenantIds: readonly string[],
  lookups: AuthLookups,
  clock: Clock,
  request: { readonly peerCertificate?: PeerCertificate | undefined },
): AuthResult | Promise<AuthResult> {
  // Why re-check the hash: a store bug (a case-insensitive collation, a wrong index) must not
  // turn one token into another tenant's credential. The check costs one string comparison.
  if (record === undefined || record.tokenHash !== tokenHash) {
    return fail({ code: 'invalid_token', reason: 'unknown_token', detail: INVALID_TOKEN_DETAIL })
  }
  const statusFailure = checkPatRecord(record, clock.now())
  if (statusFailure !== undefined) return fail(ofKey(statusFailure, record))
  const bound = record.certificateThumbprint
  if (bound !== null && bound !== undefined) {
    const unbound = checkCertificateBinding(boundDigest(bound), request.peerCertificate)
    if (unbound !== undefined) return fail(ofKey(unbound, record))
  }

  const tenantChecked = checkTenantActive(lookups, record.tenantId)
  if (!isPromiseLike(tenantChecked)) return afterTenant(tenantChecked, record, token, tenantIds)
  return afterTenantLater(tenantChecked, record, token, tenantIds)
}

// The continuations after a wait, out of the functions that may wait: a closure there makes
// V8 allocate a context for what it captures on every call, cache hits included.
function checkPatLater(
  found: PromiseLike<PatRecord | undefined>,
  token: string,
  tokenHash: string,
  context: CredentialContext,
  lookups: AuthLookups,
  clock: Clock,
): Promise<AuthResult> {
  return Promise.resolve(found).then(
    (record) =>
      checkPat(token, tokenHash, record, context.tenantIds, lookups, clock, context.request),
    () => fail(storeUnavailable()),
  )
}

function afterTenantLater(
  tenantChecked: Promise<AuthFailure | undefined>,
  record: PatRecord,
  token: string,
  tenantIds: readonly string[],
): Promise<AuthResult> {
  return tenantChecked.then((tenantFailure) => afterTenant(tenantFailure, record, token, tenantIds))
}

function afterTenant(
  tenantFailure: AuthFailure | undefined,
  record: PatRecord,
  token: string,
  tenantIds: readonly string[],
): AuthResult {
  if (tenantFailure !== undefined) return fail(ofKey(tenantFailure, record))
  const headerFailure = checkOptionalTenantHeader(tenantIds, record.tenantId)
  if (headerFailure !== undefined) return fail(ofKey(headerFailure, record))
  return patAllowed(record, token)
}

/**
 * A bound key's thumbprint decoded once per string: a cached record hands the same string
 * on every request. Bounded; a full map starts over.
 */
function boundDigest(thumbprint: string): Uint8Array {
  let digest = boundDigests.get(thumbprint)
  if (digest === undefined) {
    if (boundDigests.size >= 10_000) boundDigests.clear()
    digest = thumbprintDigest(thumbprint)
    boundDigests.set(thumbprint, digest)
  }
  return digest
}
const boundDigests = new Map<string, Uint8Array>()

/** A 401 of a stored key names the key (for usage counting; never shown to the caller). */
function ofKey(failure: AuthFailure, record: PatRecord): AuthFailure {
  switch (failure.code) {
    case 'invalid_token':
    case 'token_expired':
    case 'tenant_mismatch':
      return { ...failure, key: { tokenId: record.id, tenantId: record.tenantId } }
    default:
      return failure
  }
}

/**
 * A PAT's allowed result and its principal: built at a record's first use, then handed back
 * while the lookup returns the same record object unchanged (frozen, so sharing them is
 * safe). The memo is bounded (`bounded-memo.ts`, 1,024 places chosen from the token hash):
 * nothing is held per cached token. A record edited in place is caught by `describes`.
 */
function patAllowed(record: PatRecord, token: string): AuthResult {
  const place = digestPlace(record.tokenHash)
  const known = principals.get(record, place)
  if (known !== undefined && describes(known, record)) return known.allowed
  const principal: Principal = {
    tokenType: 'pat',
    tenantId: record.tenantId,
    subject: record.subject,
    permissions: record.permissions,
    tokenId: record.id,
    expiresAt: record.expiresAt,
    fingerprint: checkedPatFingerprint(token),
  }
  const limits = keyLimitsOf(record)
  const built = Object.freeze(limits === undefined ? principal : { ...principal, limits })
  const allowed: AuthResult = Object.freeze({ ok: true, principal: built })
  principals.set(record, place, { principal: built, allowed, tokenHash: record.tokenHash })
  return allowed
}

/**
 * A memoised principal, its allowed result, and the token hash it was built for (its
 * fingerprint is the token's).
 */
interface KnownPrincipal {
  readonly principal: Principal
  readonly allowed: AuthResult
  readonly tokenHash: string
}
const principals = new BoundedMemo<PatRecord, KnownPrincipal>(1_024)

/** Whether a memoised principal still describes the record (a lookup may edit it in place). */
function describes(known: KnownPrincipal, record: PatRecord): boolean {
  const { principal } = known
  const limits = principal.limits
  return (
    known.tokenHash === record.tokenHash &&
    principal.tenantId === record.tenantId &&
    principal.subject === record.subject &&
    principal.permissions === record.permissions &&
    principal.tokenId === record.id &&
    principal.expiresAt === record.expiresAt &&
    (limits?.rateLimit ?? null) === (record.rateLimit ?? null) &&
    (limits?.quota ?? null) === (record.quota ?? null)
  )
}

/** The key's own limits, or undefined for the usual key that has none. */
function keyLimitsOf(record: PatRecord): KeyLimits | undefined {
  const rateLimit = record.rateLimit ?? null
  const quota = record.quota ?? null
  return rateLimit === null && quota === null ? undefined : { rateLimit, quota }
}

/**
 * Revoked, rotated-out, expired and disabled PATs. Revoked shares the unknown token's client-facing
 * detail: telling a caller that a token *was* valid once helps whoever holds a list of
 * leaked strings; the precise `reason` still reaches the log.
 *
 * Rotation: a rotated-out token works until `graceUntil` (the operator's grace period, so
 * deployments can switch over), then fails with reason `rotated` and its `tokenId`. It is
 * checked before expiry on purpose: presenting a replaced token after its grace is the
 * signal that it leaked (GitLab's reuse detection), and the outcome recorder answers it by
 * revoking the whole rotation family. The core only decides; the revocation is an effect.
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
    // A disabled key is not a valid token (SPEC §5.3 rule 4): 401, never 403, which would
    // tell the caller it authenticated. Its detail is the unknown token's, as for revoked.
    case 'disabled':
      return { code: 'invalid_token', reason: 'disabled', detail: INVALID_TOKEN_DETAIL }
    default:
      return undefined
  }
}
