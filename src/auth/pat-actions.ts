import { fingerprintToken } from '../core/fingerprint.ts'
import { checkPatFormat, hashPat, issuePat } from '../core/pat.ts'
import type { PatRecord } from '../core/ports.ts'
import type { Store } from '../stores/store.ts'
import {
  checkPermissionValues,
  checkTenantIdValue,
  checkTextValue,
  OperationError,
} from './operation-error.ts'
import { type OperatorContext, operatorEvent } from './operator-audit.ts'

export type PatStatus = 'active' | 'revoked' | 'expired' | 'rotated' | 'grace'

/** A PAT's status now: a rotated-out token is in `grace` until its grace period ends. */
export function patStatus(record: PatRecord, now: number): PatStatus {
  if (record.revokedAt !== null) return 'revoked'
  if (record.supersededAt != null) {
    return record.graceUntil != null && now < record.graceUntil ? 'grace' : 'rotated'
  }
  if (record.expiresAt !== null && record.expiresAt <= now) return 'expired'
  return 'active'
}

const MAX_GRACE_MS = 30 * 86_400_000

async function requireEnabledTenant(store: Pick<Store, 'findTenant'>, id: string) {
  const tenant = await store.findTenant(id)
  if (!tenant) throw new OperationError('not_found', `no tenant ${id}`)
  if (!tenant.enabled) throw new OperationError('conflict', `tenant ${id} is disabled`)
}

/** Issues a PAT; the plaintext is returned once. Audited `pat.issued`. */
export async function issuePatFor(
  store: Pick<Store, 'findTenant' | 'insertPat' | 'appendAudit'>,
  input: {
    tenantId: string
    subject: string
    name?: string | undefined
    permissions?: readonly string[] | undefined
    expiresAt: number | null
  },
  op: OperatorContext,
): Promise<{ token: string; record: PatRecord }> {
  const tenantId = checkTenantIdValue(input.tenantId)
  const subject = checkTextValue(input.subject, 'subject', 255)
  if (subject.length === 0) throw new OperationError('invalid', 'subject: required')
  const name = checkTextValue(input.name ?? '', 'name', 100)
  const permissions = checkPermissionValues(input.permissions ?? [])
  if (input.expiresAt !== null && !(input.expiresAt > op.now)) {
    throw new OperationError('invalid', 'expiry: must be in the future')
  }
  await requireEnabledTenant(store, tenantId)
  const issued = issuePat({
    tenantId,
    subject,
    name,
    permissions,
    expiresAt: input.expiresAt,
    now: op.now,
  })
  await store.insertPat(issued.record)
  await store.appendAudit([
    operatorEvent(op, 'pat.issued', tenantId, {
      tokenId: issued.record.id,
      subject,
      name,
      permissions,
      expiresAt: input.expiresAt === null ? null : new Date(input.expiresAt).toISOString(),
    }),
  ])
  return issued
}

/** Revokes a PAT by id (idempotent). Audited `pat.revoked` when it changed. */
export async function revokePatById(
  store: Pick<Store, 'getPat' | 'revokePat' | 'appendAudit'>,
  id: string,
  op: OperatorContext,
): Promise<{ record: PatRecord; changed: boolean }> {
  const found = await store.getPat(id)
  if (!found) throw new OperationError('not_found', 'no such token')
  if (found.revokedAt !== null) return { record: found, changed: false }
  const revoked = await store.revokePat(id, op.now)
  if (!revoked) throw new OperationError('not_found', 'no such token')
  await store.appendAudit([
    operatorEvent(op, 'pat.revoked', found.tenantId, { tokenId: id, subject: found.subject }),
  ])
  return { record: revoked, changed: true }
}

/** Replaces a PAT; the old one works until the grace ends. Audited `pat.rotated`. */
export async function rotatePatById(
  store: Pick<Store, 'getPat' | 'findTenant' | 'rotatePat' | 'appendAudit'>,
  id: string,
  input: { graceMs: number; expiresAt: number | null },
  op: OperatorContext,
): Promise<{ token: string; record: PatRecord; graceUntil: number }> {
  if (!(input.graceMs >= 0 && input.graceMs <= MAX_GRACE_MS)) {
    throw new OperationError('invalid', 'grace: 0 up to 30 days')
  }
  const old = await store.getPat(id)
  if (!old) throw new OperationError('not_found', 'no such token')
  if (old.revokedAt !== null) throw new OperationError('conflict', 'the token is revoked')
  if (old.supersededAt != null) throw new OperationError('conflict', 'the token was rotated')
  await requireEnabledTenant(store, old.tenantId)
  const graceUntil = op.now + input.graceMs
  const issued = issuePat({
    tenantId: old.tenantId,
    subject: old.subject,
    name: old.name,
    permissions: old.permissions,
    expiresAt: input.expiresAt,
    now: op.now,
    rotatedFrom: old.id,
  })
  const rotated = await store.rotatePat(old.id, issued.record, op.now, graceUntil)
  if (!rotated) throw new OperationError('conflict', 'the token was revoked or rotated meanwhile')
  await store.appendAudit([
    operatorEvent(op, 'pat.rotated', old.tenantId, {
      tokenId: issued.record.id,
      rotatedFrom: old.id,
      graceUntil: new Date(graceUntil).toISOString(),
      expiresAt: input.expiresAt === null ? null : new Date(input.expiresAt).toISOString(),
    }),
  ])
  return { ...issued, graceUntil }
}

export type LeakOutcome = 'revoked' | 'already_revoked' | 'unknown' | 'not_a_pat'

/**
 * Revokes a token given in plaintext (a secret-scanning alert). Only its fingerprint is
 * returned or audited (`pat.leak_revoked`): the plaintext must not spread further.
 */
export async function revokeLeakedPat(
  store: Pick<Store, 'findPatByHash' | 'revokePat' | 'appendAudit'>,
  token: string,
  op: OperatorContext,
): Promise<{ fingerprint: string; outcome: LeakOutcome; record: PatRecord | undefined }> {
  const fingerprint = fingerprintToken(token)
  if (!checkPatFormat(token).ok) return { fingerprint, outcome: 'not_a_pat', record: undefined }
  const found = await store.findPatByHash(hashPat(token))
  if (!found) return { fingerprint, outcome: 'unknown', record: undefined }
  if (found.revokedAt !== null) return { fingerprint, outcome: 'already_revoked', record: found }
  const revoked = (await store.revokePat(found.id, op.now)) ?? found
  await store.appendAudit([
    operatorEvent(op, 'pat.leak_revoked', found.tenantId, {
      tokenId: found.id,
      fingerprint,
      subject: found.subject,
    }),
  ])
  return { fingerprint, outcome: 'revoked', record: revoked }
}
