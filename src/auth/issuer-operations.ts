import type { IssuerConfig } from '../core/issuer.ts'
import { checkIssuerConfig } from '../core/jwt.ts'
import type { StoredIssuer } from '../stores/store.ts'
import { audit, type OperationDeps, OperationRefused } from './operations.ts'

function fixedTenant(issuer: IssuerConfig): string | null {
  return issuer.tenant && 'fixed' in issuer.tenant ? issuer.tenant.fixed : null
}

/**
 * Trusts an issuer (insert, or replace the one with the same `issuer`) and audits
 * `issuer.added`. The configuration is checked by the core's own rules first, so a key the
 * server would refuse at start is refused here (`invalid_input`, with the core's message).
 */
export async function addIssuer(
  deps: OperationDeps,
  issuer: IssuerConfig,
): Promise<{ readonly issuer: StoredIssuer; readonly replaced: boolean }> {
  try {
    checkIssuerConfig(issuer)
  } catch (error) {
    throw new OperationRefused('invalid_input', issuer.issuer, (error as Error).message)
  }
  const fixed = fixedTenant(issuer)
  if (fixed !== null && !(await deps.store.findTenant(fixed))) {
    throw new OperationRefused('tenant_unknown', fixed, `no tenant ${fixed}`)
  }
  const replaced = (await deps.store.listIssuers()).some((i) => i.issuer === issuer.issuer)
  const now = deps.clock.now()
  await deps.store.putIssuer(issuer, now)
  await audit(deps, {
    type: 'issuer.added',
    tenantId: fixed,
    details: {
      issuer: issuer.issuer,
      audiences: issuer.audiences,
      keySource: issuer.keySource.kind,
      algorithms: issuer.algorithms ?? null,
      replaced,
    },
  })
  return { issuer: { ...issuer, createdAt: now }, replaced }
}

/** Stops trusting an issuer and audits `issuer.removed`. */
export async function removeIssuer(deps: OperationDeps, issuer: string): Promise<StoredIssuer> {
  const existing = (await deps.store.listIssuers()).find((i) => i.issuer === issuer)
  if (!existing || !(await deps.store.removeIssuer(issuer))) {
    throw new OperationRefused('issuer_unknown', issuer, `no issuer ${issuer}`)
  }
  await audit(deps, {
    type: 'issuer.removed',
    tenantId: fixedTenant(existing),
    details: { issuer },
  })
  return existing
}

export function listIssuers(deps: Pick<OperationDeps, 'store'>): Promise<readonly StoredIssuer[]> {
  return deps.store.listIssuers()
}
