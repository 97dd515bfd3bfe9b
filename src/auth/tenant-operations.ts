import { isSafeText, MAX_TENANT_NAME_LENGTH } from '../core/operator-text.ts'
import type { RateLimitOverride, Tenant } from '../core/ports.ts'
import { withDiskReserve } from '../stores/disk-reserve.ts'
import { ConflictError, type TenantChanges } from '../stores/store.ts'
import { badValue, checkRateLimit } from './key-fields.ts'
import { audit, type OperationDeps, OperationRefused } from './operations.ts'

/** A tenant as the CLI's JSON and the admin API show it. */
export function tenantMetadata(tenant: Tenant) {
  return {
    id: tenant.id,
    name: tenant.name,
    enabled: tenant.enabled,
    createdAt: new Date(tenant.createdAt).toISOString(),
    rateLimit: tenant.rateLimit ?? null,
  }
}

/** The tenant `id`, or the refusal `tenant_unknown`. */
async function existingTenant(deps: OperationDeps, id: string): Promise<Tenant> {
  const tenant = await deps.store.findTenant(id)
  if (!tenant) throw new OperationRefused('tenant_unknown', id, `no tenant ${id}`)
  return tenant
}

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
  const before = await existingTenant(deps, id)
  if (before.enabled === enabled) return { tenant: before, changed: false }
  // On a full disk the disk reserve is given up for it (disk-reserve.ts): a disable must land.
  const after = await withDiskReserve(deps.store, () => deps.store.setTenantEnabled(id, enabled))
  if (!after) throw new OperationRefused('tenant_unknown', id, `no tenant ${id}`)
  await withDiskReserve(deps.store, () =>
    audit(deps, {
      type: enabled ? 'tenant.enabled' : 'tenant.disabled',
      tenantId: id,
      details: {},
    }),
  )
  return { tenant: after, changed: true }
}

/** An operator's change to a tenant; an omitted field stays as it is. */
export interface TenantEdit {
  readonly name?: string | undefined
  /** The tenant's own request rate across its tokens; null: back to `rateLimit.perTenant`. */
  readonly rateLimit?: RateLimitOverride | null | undefined
}

/**
 * Edits a tenant's name or rate limit in one atomic store step and audits `tenant.updated`
 * with the changed fields before and after; every instance applies it within a second (the
 * store's `tenant_changed`). Idempotent: nothing is written or audited when nothing changes.
 */
export async function editTenant(
  deps: OperationDeps,
  id: string,
  edit: TenantEdit,
): Promise<{ readonly tenant: Tenant; readonly changed: boolean }> {
  const current = await existingTenant(deps, id)
  const changes: { -readonly [K in keyof TenantChanges]: TenantChanges[K] } = {}
  if (edit.name !== undefined) {
    if (
      edit.name.length === 0 ||
      edit.name.length > MAX_TENANT_NAME_LENGTH ||
      !isSafeText(edit.name)
    ) {
      throw badValue(
        'name',
        edit.name,
        `1-${MAX_TENANT_NAME_LENGTH} characters without control, bidi or zero-width characters`,
      )
    }
    if (edit.name !== current.name) changes.name = edit.name
  }
  if (edit.rateLimit !== undefined) {
    const rateLimit = edit.rateLimit === null ? null : checkRateLimit(edit.rateLimit)
    if (JSON.stringify(rateLimit) !== JSON.stringify(current.rateLimit ?? null)) {
      changes.rateLimit = rateLimit
    }
  }
  const keys = Object.keys(changes) as (keyof TenantChanges)[]
  if (keys.length === 0) return { tenant: current, changed: false }
  const result = await deps.store.updateTenant(id, changes)
  if (!result) throw new OperationRefused('tenant_unknown', id, `no tenant ${id}`)
  const pick = (tenant: Tenant) =>
    Object.fromEntries(keys.map((key) => [key, tenant[key] ?? null])) as Record<string, unknown>
  await audit(deps, {
    type: 'tenant.updated',
    tenantId: id,
    details: { before: pick(result.before), after: pick(result.after) },
  })
  return { tenant: result.after, changed: true }
}
