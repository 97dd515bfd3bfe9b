/**
 * Personal Access Tokens (DESIGN rule 4): format and checksum before any store access, one
 * lookup by SHA-256, then revoked → rotated → expired → tenant → optional `X-Tenant-Id`.
 */
import { type MaybePromise, thenMaybe } from '../../lib/maybe-async.ts'
import { checkCertificateBinding, thumbprintDigest } from '../certificate-binding.ts'
import type { Authenticator, CredentialKind, PeerCertificate } from '../credential-kind.ts'
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
      return thenMaybe(
        found,
        (record) =>
          checkPat(token, tokenHash, record, context.tenantIds, lookups, clock, context.request),
        () => fail(storeUnavailable()),
      )
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

  return thenMaybe(checkTenantActive(lookups, record.tenantId), (tenantFailure) => {
    if (tenantFailure !== undefined) return fail(ofKey(tenantFailure, record))
    const headerFailure = checkOptionalTenantHeader(tenantIds, record.tenantId)
    if (headerFailure !== undefined) return fail(ofKey(headerFailure, record))
    return { ok: true, principal: patPrincipal(record, token) }
  })
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
 * A PAT's principal, built per request. Not memoised per cached record as a JWT's is: that
 * would cost memory per cached token to save a fraction of a microsecond.
 */
function patPrincipal(record: PatRecord, token: string): Principal {
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
  return Object.freeze(limits === undefined ? principal : { ...principal, limits })
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
