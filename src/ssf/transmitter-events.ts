/**
 * Which audit events of our own keys are CAEP `credential-change` events (CAEP 1.0 §3.3),
 * and the SET (RFC 8417) each becomes for one receiver. Pure: the sender (transmitter.ts)
 * signs and posts what this returns.
 *
 * The subject is the key's public id (`sub_id` format `opaque`, SSF 1.0 §3): the only name a
 * receiver needs to match the key, and public already (audit events, the admin API). Never
 * the token nor its hash: a SET goes to another party, and the hash is what the store looks
 * a presented token up by.
 */
import { createHash } from 'node:crypto'
import type { StoredAuditEvent } from '../stores/store.ts'
import { CAEP_EVENT } from './events.ts'

/**
 * `credential_type` of our keys. CAEP 1.0 lists password, pin, x509, fido2-*, fido-u2f,
 * verifiable-credential, phone-*, app, "or any other credential type supported mutually by
 * the Transmitter and the Receiver": none of the listed ones is an API key (`app` is an
 * authenticator app), so this is such a mutual value, documented in docs/caep-transmitter.md.
 */
export const API_KEY_CREDENTIAL_TYPE = 'api_key'

/** The audit event types that can become a credential-change SET. */
export const CREDENTIAL_CHANGE_AUDIT_TYPES: readonly string[] = [
  'pat.revoked',
  'pat.leak_revoked',
  'pat.reuse_detected',
  'pat.disabled',
  'pat.enabled',
  'pat.updated',
]

/** CAEP 1.0 §3.3.1 `change_type`. */
export type ChangeType = 'create' | 'revoke' | 'update' | 'delete'

export interface CredentialChange {
  readonly tokenId: string
  readonly changeType: ChangeType
  /** CAEP `initiating_entity`: admin (an operator), user (the key itself), policy, system. */
  readonly initiatingEntity: 'admin' | 'user' | 'policy' | 'system'
  /** CAEP `reason_admin`, English. */
  readonly reason: string
}

/**
 * The credential changes an audit event stands for: none for an event that is not one (an
 * edit of the name, the quota, the expiry), several for a rotation family revoked at once.
 */
export function credentialChangesOf(event: StoredAuditEvent): CredentialChange[] {
  const details = event.details as Record<string, unknown>
  const tokenId = typeof details.tokenId === 'string' ? details.tokenId : undefined
  const operator = initiatorOf(event)
  switch (event.type) {
    case 'pat.revoked':
      if (!tokenId) return []
      return [{ tokenId, changeType: 'revoke', initiatingEntity: operator, reason: 'key revoked' }]
    case 'pat.leak_revoked':
      if (!tokenId) return []
      return [
        {
          tokenId,
          changeType: 'revoke',
          // A secret-scanning report (source: github) is the system's doing, not an operator's.
          initiatingEntity: details.source === undefined ? operator : 'system',
          reason: 'key found leaked and revoked',
        },
      ]
    case 'pat.reuse_detected': {
      const ids = Array.isArray(details.revokedTokenIds) ? details.revokedTokenIds : []
      return ids
        .filter((id): id is string => typeof id === 'string')
        .map((id) => ({
          tokenId: id,
          changeType: 'revoke' as const,
          initiatingEntity: 'policy' as const,
          reason: 'a rotated key was used again: its family revoked',
        }))
    }
    case 'pat.disabled':
    case 'pat.enabled':
      if (!tokenId) return []
      return [
        {
          tokenId,
          changeType: 'update',
          initiatingEntity: operator,
          reason: event.type === 'pat.disabled' ? 'key disabled' : 'key enabled',
        },
      ]
    case 'pat.updated': {
      const before = details.before as Record<string, unknown> | undefined
      if (!tokenId || !before || !('permissions' in before)) return []
      return [
        {
          tokenId,
          changeType: 'update',
          initiatingEntity: operator,
          reason: 'key permissions changed',
        },
      ]
    }
    default:
      return []
  }
}

/** Operators (CLI, admin token, console sign-in) are `admin`; a key acting on itself is `user`. */
function initiatorOf(event: StoredAuditEvent): CredentialChange['initiatingEntity'] {
  const actor = event.actor ?? ''
  if (/^(cli|admin|oidc):/.test(actor)) return 'admin'
  // A secret-scanning report (github:), a CAEP receiver (ssf:), or no actor: not a person.
  if (actor === '' || /^(github|ssf):/.test(actor)) return 'system'
  return 'user'
}

export interface SetContext {
  readonly issuer: string
  readonly audience: string
  /** Epoch ms the SET is made (its `iat`). */
  readonly now: number
}

/**
 * The claims of the SET for one change. `jti` is derived from the audit event, the key and the
 * audience, so a SET sent again after a failed attempt carries the same `jti` and a receiver
 * drops the duplicate (RFC 8935 §2: delivery is at least once); `txn` is the audit event's id,
 * for a receiver that also takes our webhook. No `sub` and no `exp` (RFC 8417 §2.2, §4.5): a
 * SET is a statement of fact, not an access or identity token.
 */
export function credentialChangeSet(
  event: StoredAuditEvent,
  change: CredentialChange,
  context: SetContext,
): Record<string, unknown> {
  const jti = createHash('sha256')
    .update(`${context.audience}\n${event.id}\n${change.tokenId}`)
    .digest('base64url')
    .slice(0, 32)
  return {
    iss: context.issuer,
    aud: context.audience,
    iat: Math.floor(context.now / 1000),
    jti,
    txn: event.id,
    sub_id: { format: 'opaque', id: change.tokenId },
    ...(event.tenantId !== null ? { tenant_id: event.tenantId } : {}),
    events: {
      [CAEP_EVENT.credentialChange]: {
        credential_type: API_KEY_CREDENTIAL_TYPE,
        change_type: change.changeType,
        event_timestamp: Math.floor(event.time / 1000),
        initiating_entity: change.initiatingEntity,
        reason_admin: { en: change.reason },
      },
    },
  }
}
