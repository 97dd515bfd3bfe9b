import { randomUUID } from 'node:crypto'
import type { AuthFailure } from '../core/failure.ts'
import { loggablePath } from '../http/log-safe.ts'
import type { AuditStore, StoredAuditEvent } from '../stores/store.ts'
import type { AuditEventInput } from '../stores/write-behind.ts'

type Iso = string | null

/**
 * Every audit event tokengate writes, by type: its outcome and its `details`. This union is
 * the schema docs/events.md describes; the stored record (`stores/store.ts`) adds id, time,
 * actor, client address and request id. Details are log-safe: never a token, hash or secret.
 */
export type AuditEvent =
  | {
      readonly type: 'auth.failed'
      readonly tenantId: string | null
      readonly outcome: Exclude<
        AuthFailure['code'],
        ForbiddenCode | 'rate_limited' | 'quota_exhausted' | 'bad_path'
      >
      readonly details: { method: string; path: string; reason?: string; rule?: string }
    }
  | {
      readonly type: 'auth.forbidden'
      readonly tenantId: string | null
      /** `insufficient_permission`, or `gateway_<decision>` for a gateway policy refusal. */
      readonly outcome: string
      readonly details: { method: string; path: string; policyLine?: number }
    }
  | {
      readonly type: 'pat.issued'
      readonly tenantId: string
      readonly details: {
        tokenId: string
        subject: string
        name: string
        permissions: readonly string[]
        expiresAt: Iso
        /** Set only for a key that has them (issue #24). */
        rateLimit?: unknown
        quota?: unknown
        metadata?: unknown
        externalId?: unknown
      }
    }
  | {
      /** A key edited: the changed fields only, as they were and as they are now. */
      readonly type: 'pat.updated'
      readonly tenantId: string
      readonly details: {
        tokenId: string
        before: Record<string, unknown>
        after: Record<string, unknown>
        quotaUsageReset?: true
      }
    }
  | {
      readonly type: 'pat.disabled' | 'pat.enabled'
      readonly tenantId: string
      readonly details: { tokenId: string; subject: string }
    }
  | {
      /** A key's quota ran out (once per key and period, however many requests it refuses). */
      readonly type: 'pat.quota_exhausted'
      readonly tenantId: string
      readonly outcome: 'quota_exhausted'
      readonly details: { tokenId: string; limit: number; refill: string; resetsAt: Iso }
    }
  | {
      readonly type: 'tenant.updated'
      readonly tenantId: string
      readonly details: { before: Record<string, unknown>; after: Record<string, unknown> }
    }
  | {
      readonly type: 'pat.revoked'
      readonly tenantId: string
      readonly details: { tokenId: string; subject?: string; self?: boolean }
    }
  | {
      readonly type: 'pat.rotated'
      readonly tenantId: string
      readonly details: { tokenId: string; rotatedFrom: string; graceUntil: Iso; expiresAt: Iso }
    }
  | {
      readonly type: 'pat.leak_revoked'
      readonly tenantId: string
      readonly details: {
        tokenId: string
        fingerprint: string
        subject: string
        /** Who reported it: `github` (secret scanning partner report); absent: an operator. */
        source?: string
        /** Where the reporter found it (a public URL), when it said. */
        url?: string
      }
    }
  | {
      readonly type: 'pat.reuse_detected'
      readonly tenantId: string | null
      readonly outcome: 'family_revoked'
      readonly details: { tokenId: string; revokedTokenIds: readonly string[] }
    }
  | {
      readonly type: 'tenant.created'
      readonly tenantId: string
      readonly details: { name: string }
    }
  | {
      readonly type: 'tenant.enabled' | 'tenant.disabled'
      readonly tenantId: string
      readonly details: Record<string, never>
    }
  | {
      readonly type: 'issuer.added'
      readonly tenantId: string | null
      readonly details: {
        issuer: string
        audiences: readonly string[]
        keySource: string
        algorithms: readonly string[] | null
        replaced: boolean
      }
    }
  | {
      readonly type: 'issuer.removed'
      readonly tenantId: string | null
      readonly details: { issuer: string }
    }
  | {
      /** An operator's JWT revocation rule (jwt-revocation-operations.ts), made or widened. */
      readonly type: 'jwt.revoked'
      readonly tenantId: string | null
      readonly details: {
        rule: string
        issuer: string
        kind: string
        value: string
        issuedBefore: Iso
        expiresAt: Iso
        reason: string | null
        /** A rule made by a CAEP event: the SET's `jti` and event type (ssf/receiver.ts). */
        set?: string
        event?: string
      }
    }
  | {
      /** A SET from a CAEP/SSF transmitter, verified and applied (ssf/receiver.ts). */
      readonly type: 'ssf.event_received'
      readonly tenantId: null
      readonly details: {
        receiver: string
        transmitter: string
        delivery: 'push' | 'poll'
        jti: string
        event: string
        /** The revocation rules it made or widened (their ids); empty for other events. */
        rules: readonly string[]
        /** Why nothing was revoked, when nothing was. */
        note: string | null
      }
    }
  | {
      /** A SET refused (RFC 8935 §2.4 error code); never the SET itself. */
      readonly type: 'ssf.event_refused'
      readonly tenantId: null
      readonly outcome: 'refused'
      readonly details: {
        receiver: string
        transmitter: string
        delivery: 'push' | 'poll'
        err: string
        reason: string
      }
    }
  | {
      readonly type: 'jwt.revocation_removed'
      readonly tenantId: string | null
      readonly details: { rule: string; issuer: string; kind: string; value: string }
    }
  | {
      readonly type: 'admin_token.issued'
      readonly tenantId: null
      readonly details: { adminTokenId: string; name: string; role: string; expiresAt: Iso }
    }
  | {
      readonly type: 'admin_token.revoked'
      readonly tenantId: null
      readonly details: { adminTokenId: string; name: string }
    }
  | {
      readonly type: 'policy.updated' | 'policy.removed'
      readonly tenantId: null
      /** `rules`: how many rules the stored policy has (absent on removal). */
      readonly details: { name: string; rules?: number }
    }
  | {
      /** One per client address and window while the address is over its failed-auth limit. */
      readonly type: 'auth.throttled'
      readonly tenantId: null
      readonly outcome: 'rate_limited'
      /** `path`: the signature-authenticated endpoint refused (auth/address-throttle.ts). */
      readonly details: { refused: number; windowSec: number; path?: string }
    }
  | {
      /**
       * A request refused outside the gate's own steps, with its own problem: the decision
       * listener's bad request line (400, 404), the gateway's in-flight caps (429, 503).
       */
      readonly type: 'auth.refused'
      readonly tenantId: string | null
      /** The problem `code` answered. */
      readonly outcome: string
      readonly details: { method: string; path: string; status: number }
    }

export type AuditEventType = AuditEvent['type'] | 'audit.dropped'

/** Every event type, for pickers (a missing or unknown type fails to compile). */
export const AUDIT_EVENT_TYPES = Object.keys({
  'auth.failed': true,
  'auth.forbidden': true,
  'auth.throttled': true,
  'auth.refused': true,
  'pat.issued': true,
  'pat.updated': true,
  'pat.disabled': true,
  'pat.enabled': true,
  'pat.quota_exhausted': true,
  'pat.revoked': true,
  'pat.rotated': true,
  'pat.leak_revoked': true,
  'pat.reuse_detected': true,
  'tenant.created': true,
  'tenant.updated': true,
  'tenant.enabled': true,
  'tenant.disabled': true,
  'issuer.added': true,
  'issuer.removed': true,
  'jwt.revoked': true,
  'jwt.revocation_removed': true,
  'ssf.event_received': true,
  'ssf.event_refused': true,
  'admin_token.issued': true,
  'admin_token.revoked': true,
  'policy.updated': true,
  'policy.removed': true,
  'audit.dropped': true,
} satisfies Record<AuditEventType, true>) as AuditEventType[]

/** Refusals of an authenticated caller: audited as `auth.forbidden`. */
type ForbiddenCode = 'insufficient_permission' | 'route_denied' | 'tenant_path_mismatch'

/** Who acted, and over which request: the CLI's `cli:<user>`, or a caller's token fingerprint. */
export interface Actor {
  readonly actor: string | null
  readonly clientAddress?: string | null | undefined
  readonly requestId?: string | null | undefined
}

/** The one place an audit record is built from an event and its actor. */
export function auditRecord(event: AuditEvent, by: Actor, time?: number): AuditEventInput {
  const outcome = 'outcome' in event ? event.outcome : 'ok'
  // Two literals, not a spread of `{ time }` or `{}`: one object per record, the same keys in
  // the same order (`time` first when given).
  if (time !== undefined) {
    return {
      time,
      type: event.type,
      tenantId: event.tenantId,
      actor: by.actor,
      outcome,
      clientAddress: by.clientAddress ?? null,
      requestId: by.requestId ?? null,
      details: event.details,
    }
  }
  return {
    type: event.type,
    tenantId: event.tenantId,
    actor: by.actor,
    outcome,
    clientAddress: by.clientAddress ?? null,
    requestId: by.requestId ?? null,
    details: event.details,
  }
}

/** What an audited refusal keeps of its request, and who made it. */
export interface RefusedRequest extends Actor {
  readonly method: string
  /** The request target; stored as `loggablePath` keeps it (no query, no token, capped). */
  readonly url: string
  readonly tenantId: string | null
}

/**
 * The one audit record of a refusal, whichever front end gave it: a 401 or 400 is
 * `auth.failed`, a permission or policy refusal `auth.forbidden`. None for a 503 (the caller
 * did nothing wrong), a 429 (the failed-authentication limit's are aggregated per address, an
 * exhausted quota is audited once per key and period) or an ambiguous path (refused before
 * the policy read it).
 */
export function authFailureRecord(
  failure: AuthFailure,
  request: RefusedRequest,
): AuditEventInput | undefined {
  // Built as the record at once (no event object, no spread details): a refusal flood
  // writes one of these per request.
  switch (failure.code) {
    case 'unavailable':
    case 'rate_limited':
    case 'quota_exhausted':
    case 'bad_path':
      return undefined
    case 'insufficient_permission':
    case 'route_denied':
    case 'tenant_path_mismatch': {
      const { method } = request
      const path = loggablePath(request.url)
      return refusalRecord(
        'auth.forbidden',
        FORBIDDEN_OUTCOMES[failure.code],
        failure.policyLine === undefined
          ? { method, path }
          : { method, path, policyLine: failure.policyLine },
        request,
      )
    }
    case 'invalid_token':
      return refusalRecord(
        'auth.failed',
        failure.code,
        failedDetails(request.method, request.url, failure.reason, failure.ruleId),
        request,
      )
    default:
      return refusalRecord(
        'auth.failed',
        failure.code,
        failedDetails(request.method, request.url, undefined, undefined),
        request,
      )
  }
}

/**
 * An `auth.failed` record's details, the last one handed back while the next refusal has the
 * same method, target, reason and rule (frozen: shared by those records). Why: a flood of bad
 * tokens repeats one request, and each refusal redacted and cut its target again (two regular
 * expressions) and made a details object (issue #36).
 */
function failedDetails(
  method: string,
  url: string,
  reason: string | undefined,
  rule: string | undefined,
): FailedDetails {
  const last = lastFailed
  if (last.url === url && last.method === method && last.reason === reason && last.rule === rule) {
    return last.details
  }
  const path = last.url === url ? last.details.path : loggablePath(url)
  const details: FailedDetails = Object.freeze(
    reason === undefined
      ? { method, path }
      : rule === undefined
        ? { method, path, reason }
        : { method, path, reason, rule },
  )
  lastFailed = { method, url, reason, rule, details }
  return details
}

type FailedDetails = Extract<AuditEvent, { type: 'auth.failed' }>['details']

let lastFailed: {
  readonly method: string
  readonly url: string
  readonly reason: string | undefined
  readonly rule: string | undefined
  readonly details: FailedDetails
} = { method: '', url: '', reason: undefined, rule: undefined, details: { method: '', path: '' } }

/** `auditRecord` of an `auth.failed` or `auth.forbidden` event, as one literal. */
function refusalRecord(
  type: 'auth.failed' | 'auth.forbidden',
  outcome: string,
  details: Extract<AuditEvent, { type: 'auth.failed' | 'auth.forbidden' }>['details'],
  request: RefusedRequest,
): AuditEventInput {
  return {
    type,
    tenantId: request.tenantId,
    actor: request.actor,
    outcome,
    clientAddress: request.clientAddress ?? null,
    requestId: request.requestId ?? null,
    details,
  }
}

/** The audited outcome of each forbidden kind (`gateway_<decision>` for the route policy's). */
const FORBIDDEN_OUTCOMES: Readonly<Record<ForbiddenCode, string>> = {
  insufficient_permission: 'insufficient_permission',
  route_denied: 'gateway_deny',
  tenant_path_mismatch: 'gateway_tenant_mismatch',
}

/** Where application-layer operations send their audit events. */
export interface AuditSink {
  write(record: AuditEventInput): void | Promise<void>
}

/** An audit sink that appends each event to the store at once (the CLI: one process, one act). */
export function storeAuditSink(
  store: Pick<AuditStore, 'appendAudit'>,
  now: () => number,
): AuditSink {
  return {
    async write(record) {
      const stored: StoredAuditEvent = { id: randomUUID(), time: now(), ...record }
      await store.appendAudit([stored])
    },
  }
}
