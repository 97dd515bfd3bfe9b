import type { Clock } from '../core/ports.ts'
import type { IssuerStore, PatStore, PolicyStore, TenantStore } from '../stores/store.ts'
import { type Actor, type AuditEvent, type AuditSink, auditRecord } from './audit-events.ts'

/**
 * What every application-layer operation runs with: the store, the clock, who acts, and
 * where its audit events go. Operations return values and throw `OperationRefused`; they
 * never print, so the CLI, the admin API and library users share them.
 */
export interface OperationDeps {
  readonly store: TenantStore & PatStore & IssuerStore & PolicyStore
  readonly clock: Clock
  readonly actor: Actor
  readonly audit: AuditSink
}

export type RefusalCode =
  | 'tenant_unknown'
  | 'tenant_disabled'
  | 'tenant_exists'
  | 'token_unknown'
  | 'token_revoked'
  | 'token_rotated'
  | 'token_changed'
  | 'token_disabled'
  | 'issuer_unknown'
  | 'revocation_unknown'
  | 'invalid_input'
  | 'lifetime_exceeded'

/** A bound on an operator's value: at most `maxMs` milliseconds. */
export interface RefusalLimit {
  readonly field: string
  readonly maxMs: number
}

/**
 * An operation refused for a reason the operator can act on. `subject` names the tenant,
 * token or issuer concerned; the caller words the message for its own audience.
 */
export class OperationRefused extends Error {
  override readonly name = 'OperationRefused'
  readonly code: RefusalCode
  readonly subject: string
  /** When the token was revoked or rotated (epoch ms), for `token_revoked`/`token_rotated`. */
  readonly at: number | null
  /** The tenant of the token concerned, when known. */
  readonly tenantId: string | null
  /**
   * The bound a value had to keep (`field`: `grace`, `lifetime`), for each surface to word in
   * its own unit (seconds, hours, a duration), so that none restates the number.
   */
  readonly limit: RefusalLimit | null
  constructor(
    code: RefusalCode,
    subject: string,
    message: string,
    context: { at?: number | null; tenantId?: string | null; limit?: RefusalLimit } = {},
  ) {
    super(message)
    this.code = code
    this.subject = subject
    this.at = context.at ?? null
    this.tenantId = context.tenantId ?? null
    this.limit = context.limit ?? null
  }
}

/** Writes one audit event with the operation's actor (awaited: a CLI act is not done before it). */
export async function audit(deps: OperationDeps, event: AuditEvent): Promise<void> {
  await deps.audit.write(auditRecord(event, deps.actor, deps.clock.now()))
}

/** The tenant must exist and be enabled to receive new tokens. */
export async function requireEnabledTenant(store: TenantStore, tenantId: string): Promise<void> {
  const tenant = await store.findTenant(tenantId)
  if (!tenant) throw new OperationRefused('tenant_unknown', tenantId, `no tenant ${tenantId}`)
  if (!tenant.enabled) {
    throw new OperationRefused('tenant_disabled', tenantId, `tenant ${tenantId} is disabled`)
  }
}

/** A page cursor the store did not issue: the caller's mistake (400), not an outage. */
export { InvalidCursorError } from '../stores/cursor.ts'
