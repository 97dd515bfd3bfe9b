import { patStatus } from '../../../core/pat.ts'
import type { PatRecord } from '../../../core/ports.ts'
import { iso } from './schemas.ts'

/** A PAT's public metadata: never its hash, never the token. */
export function tokenView(record: PatRecord, now: number) {
  return {
    id: record.id,
    name: record.name,
    subject: record.subject,
    tenantId: record.tenantId,
    permissions: [...record.permissions],
    hint: `pat_…${record.last4}`,
    status: patStatus(record, now),
    createdAt: new Date(record.createdAt).toISOString(),
    expiresAt: iso(record.expiresAt),
    lastUsedAt: iso(record.lastUsedAt),
    revokedAt: iso(record.revokedAt),
    rotatedFrom: record.rotatedFrom,
    graceUntil: iso(record.graceUntil ?? null),
  }
}
