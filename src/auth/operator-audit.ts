import { randomUUID } from 'node:crypto'
import type { AuditEvent } from '../stores/store.ts'

/**
 * Who performs an operator action and from where: the CLI (`cli:<os user>`), an admin token
 * (`admin:<name>`) or an SSO operator (`oidc:<sub>`). Recorded as the audit event's actor.
 */
export interface OperatorContext {
  readonly actor: string
  readonly now: number
  readonly clientAddress?: string | null | undefined
  readonly requestId?: string | null | undefined
}

/** One successful operator action as an audit event. `details` must be log-safe. */
export function operatorEvent(
  op: OperatorContext,
  type: string,
  tenantId: string | null,
  details: Record<string, unknown>,
): AuditEvent {
  return {
    id: randomUUID(),
    time: op.now,
    type,
    tenantId,
    actor: op.actor,
    outcome: 'ok',
    clientAddress: op.clientAddress ?? null,
    requestId: op.requestId ?? null,
    details,
  }
}
