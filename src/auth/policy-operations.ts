import type { StoredPolicy } from '../stores/store.ts'
import { audit, type OperationDeps } from './operations.ts'

/**
 * Stores a route policy under `name` (`gateway.policyStore`) and audits `policy.updated`.
 * The caller has validated `text` with the gateway's parser (this layer does not import the
 * gateway); every instance reloads it from the change log.
 */
export async function storePolicy(
  deps: OperationDeps,
  policy: { readonly name: string; readonly text: string; readonly rules: number },
): Promise<void> {
  await deps.store.putPolicy(policy.name, policy.text, deps.clock.now())
  await audit(deps, {
    type: 'policy.updated',
    tenantId: null,
    details: { name: policy.name, rules: policy.rules },
  })
}

/** Removes the stored policy (instances fall back to the default policy); audited. */
export async function removeStoredPolicy(deps: OperationDeps, name: string): Promise<boolean> {
  const removed = await deps.store.removePolicy(name)
  if (removed) await audit(deps, { type: 'policy.removed', tenantId: null, details: { name } })
  return removed
}

export function readStoredPolicy(
  deps: Pick<OperationDeps, 'store'>,
  name: string,
): Promise<StoredPolicy | undefined> {
  return deps.store.getPolicy(name)
}
