import type { Tenant } from '../core/ports.ts'
import { ConflictError } from '../stores/store.ts'
import { audit, type OperationDeps, OperationRefused } from './operations.ts'

/** Creates a tenant (refused when the id exists) and audits `tenant.created`. */
export async function createTenant(
  deps: OperationDeps,
  tenant: { readonly id: string; readonly name: string },
): Promise<Tenant> {
  let created: Tenant
  try {
    created = await deps.store.createTenant(tenant, deps.clock.now())
  } catch (error) {
    if (error instanceof ConflictError) {
      throw new OperationRefused('tenant_exists', tenant.id, `tenant ${tenant.id} already exists`)
    }
    throw error
  }
  await audit(deps, { type: 'tenant.created', tenantId: tenant.id, details: { name: tenant.name } })
  return created
}

export function listTenants(deps: Pick<OperationDeps, 'store'>): Promise<readonly Tenant[]> {
  return deps.store.listTenants()
}

/**
 * Enables or disables a tenant (a disabled tenant's PATs and JWTs are refused). Idempotent:
 * `changed` is false, and nothing is audited, when it already was in that state.
 */
export async function setTenantEnabled(
  deps: OperationDeps,
  id: string,
  enabled: boolean,
): Promise<{ readonly tenant: Tenant; readonly changed: boolean }> {
  const before = await deps.store.findTenant(id)
  if (!before) throw new OperationRefused('tenant_unknown', id, `no tenant ${id}`)
  if (before.enabled === enabled) return { tenant: before, changed: false }
  const after = await deps.store.setTenantEnabled(id, enabled)
  if (!after) throw new OperationRefused('tenant_unknown', id, `no tenant ${id}`)
  await audit(deps, {
    type: enabled ? 'tenant.enabled' : 'tenant.disabled',
    tenantId: id,
    details: {},
  })
  return { tenant: after, changed: true }
}
