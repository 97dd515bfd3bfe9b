import type { Tenant } from '../core/ports.ts'
import { ConflictError, type Store } from '../stores/store.ts'
import { checkTenantIdValue, checkTextValue, OperationError } from './operation-error.ts'
import { type OperatorContext, operatorEvent } from './operator-audit.ts'

type TenantStore = Pick<Store, 'createTenant' | 'findTenant' | 'setTenantEnabled' | 'appendAudit'>

/** Creates an enabled tenant; audited `tenant.created`. */
export async function createTenant(
  store: TenantStore,
  input: { id: string; name?: string | undefined },
  op: OperatorContext,
): Promise<Tenant> {
  const id = checkTenantIdValue(input.id)
  const name = checkTextValue(input.name || id, 'name', 200)
  let tenant: Tenant
  try {
    tenant = await store.createTenant({ id, name }, op.now)
  } catch (error) {
    if (error instanceof ConflictError) {
      throw new OperationError('conflict', `tenant ${id} already exists`)
    }
    throw error
  }
  await store.appendAudit([operatorEvent(op, 'tenant.created', id, { name })])
  return tenant
}

/** Enables or disables a tenant; audited only when it changed. */
export async function setTenantEnabled(
  store: TenantStore,
  id: string,
  enabled: boolean,
  op: OperatorContext,
): Promise<{ tenant: Tenant; changed: boolean }> {
  const before = await store.findTenant(id)
  if (!before) throw new OperationError('not_found', `no tenant ${checkTenantIdValue(id)}`)
  if (before.enabled === enabled) return { tenant: before, changed: false }
  const after = await store.setTenantEnabled(id, enabled)
  if (!after) throw new OperationError('not_found', `no tenant ${id}`)
  const type = enabled ? 'tenant.enabled' : 'tenant.disabled'
  await store.appendAudit([operatorEvent(op, type, id, {})])
  return { tenant: after, changed: true }
}
