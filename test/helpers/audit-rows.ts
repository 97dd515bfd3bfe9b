import { setTimeout as sleep } from 'node:timers/promises'
import { openStore } from '../../src/stores/open-store.ts'
import type { AdminStore, StoredAuditEvent } from '../../src/stores/store.ts'

/**
 * The audit row of one request, by its request id, read from the store of a running
 * tokengate (audit rows are written behind: polled for up to `withinMs`). Across tenants, so
 * a refusal with no tenant is found too. Undefined when none arrived.
 */
export async function auditRowOf(
  dataDir: string,
  requestId: string,
  withinMs = 5_000,
): Promise<StoredAuditEvent | undefined> {
  const store = await openStore({ dataDir })
  const { admin } = store as unknown as { admin: AdminStore }
  try {
    const deadline = Date.now() + withinMs
    for (;;) {
      const page = await admin.searchAudit({}, { limit: 200 })
      const row = page.items.find((item) => item.requestId === requestId)
      if (row || Date.now() > deadline) return row
      await sleep(100)
    }
  } finally {
    await store.close()
  }
}
