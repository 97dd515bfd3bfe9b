/**
 * A migrated SQLite store in a data directory, holding the test tenant ("Tenant A"), and a
 * maker of PATs for it, the setup tests that serve a data directory begin with.
 *
 * @example
 * const seeded = await openSeededStore(dataDir)
 * const { token } = await seeded.pat({ permissions: ['tokens:read'] })
 * await seeded.store.close()
 */
import { issuePat } from '../../src/core/pat.ts'
import { openStore } from '../../src/stores/open-store.ts'
import type { Store } from '../../src/stores/store.ts'
import { TEST_TENANT } from './jwt.ts'

export interface SeededStore {
  readonly store: Store
  /** When the tenant was created (ms). */
  readonly now: number
  /** Issues a PAT of the test tenant and stores it (unless `stored: false`). */
  pat(options?: {
    readonly permissions?: readonly string[]
    readonly certificateThumbprint?: string | null
    readonly subject?: string
    /** Default: an hour from `now`. */
    readonly expiresAt?: number | null
    /** Default: `now`. */
    readonly issuedAt?: number
    /** false: a well-formed PAT no store holds. */
    readonly stored?: boolean
  }): Promise<ReturnType<typeof issuePat>>
}

export async function openSeededStore(dataDir: string): Promise<SeededStore> {
  const store = await openStore({ dataDir })
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: TEST_TENANT, name: 'Tenant A' }, now)
  return {
    store,
    now,
    async pat(options = {}) {
      const subject = options.subject ?? 'test'
      const issued = issuePat({
        tenantId: TEST_TENANT,
        subject,
        name: subject,
        permissions: options.permissions ?? [],
        expiresAt: options.expiresAt === undefined ? now + 3_600_000 : options.expiresAt,
        now: options.issuedAt ?? now,
      })
      const { certificateThumbprint } = options
      if (options.stored === false) return issued
      await store.insertPat(
        certificateThumbprint === undefined
          ? issued.record
          : { ...issued.record, certificateThumbprint },
      )
      return issued
    },
  }
}
