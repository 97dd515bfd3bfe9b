import { issuePat } from '../core/pat.ts'
import { ConflictError, type Store } from '../stores/store.ts'
import { devIssuerConfig, ensureDevIssuerKey } from './issuer.ts'

export const DEMO_TENANT = 'demo'
export const DEMO_PERMISSIONS = ['tokens:read', 'tokens:revoke', 'audit:read'] as const

export interface DevSeed {
  readonly tenantId: string
  /** The demo PAT's plaintext: present only on the run that created it (shown once). */
  readonly demoPat: string | undefined
}

/**
 * Prepares a dev data directory: the local JWT issuer (always re-registered, so a key file
 * and the store never disagree), and on first run a demo tenant and a demo PAT.
 */
export async function seedDevData(store: Store, dataDir: string, now: number): Promise<DevSeed> {
  const key = await ensureDevIssuerKey(dataDir)
  const issuer = devIssuerConfig(key)
  const registered = (await store.listIssuers()).find((i) => i.issuer === issuer.issuer)
  if (JSON.stringify(registered?.keySource) !== JSON.stringify(issuer.keySource)) {
    await store.putIssuer(issuer, now)
  }
  const seeded = { tenantId: DEMO_TENANT, demoPat: undefined }
  if (await store.findTenant(DEMO_TENANT)) return seeded
  try {
    await store.createTenant({ id: DEMO_TENANT, name: 'Demo tenant' }, now)
  } catch (error) {
    // Another instance started at the same time on the same Postgres seeded it first.
    if (error instanceof ConflictError) return seeded
    throw error
  }
  const { token, record } = issuePat({
    tenantId: DEMO_TENANT,
    subject: 'demo-user',
    name: 'demo PAT',
    permissions: [...DEMO_PERMISSIONS],
    expiresAt: now + 90 * 86_400_000,
    now,
  })
  await store.insertPat(record)
  return { tenantId: DEMO_TENANT, demoPat: token }
}
