import type { PatRecord } from '../../../core/ports.ts'
import { iso } from './schemas.ts'

/** Revoked wins; a rotated-out token is `rotated` once its grace is over, `active` during it. */
function tokenStatus(record: PatRecord, now: number) {
  if (record.revokedAt !== null) return 'revoked'
  if (record.supersededAt != null && (record.graceUntil ?? record.supersededAt) <= now)
    return 'rotated'
  if (record.expiresAt !== null && record.expiresAt <= now) return 'expired'
  return 'active'
}

/** A PAT's public metadata: never its hash, never the token. */
export function tokenView(record: PatRecord, now: number) {
  const status = tokenStatus(record, now)
  return {
    id: record.id,
    name: record.name,
    subject: record.subject,
    tenantId: record.tenantId,
    permissions: [...record.permissions],
    hint: `pat_…${record.last4}`,
    status,
    createdAt: new Date(record.createdAt).toISOString(),
    expiresAt: iso(record.expiresAt),
    lastUsedAt: iso(record.lastUsedAt),
    revokedAt: iso(record.revokedAt),
    rotatedFrom: record.rotatedFrom,
    graceUntil: iso(record.graceUntil ?? null),
  }
}
