/**
 * A steady caller through a proxy that keeps decisions (nginx-cache.test.ts,
 * nginx-lua.test.ts): what the < 1 s revocation promise is measured with.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { setTimeout as sleep } from 'node:timers/promises'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'

/** The promise: a revoked key is refused by the proxy within 1 s, cache on. */
export const REVOCATION_BOUND_MS = 1_000

/**
 * A steady caller through nginx (answered from its cache, as under load) while `act` revokes
 * its credential: when the first refused and the last allowed request were SENT (nginx
 * decides on arrival, later).
 */
export async function steadyCaller(
  url: () => string,
  headers: [string, string][],
  act: () => Promise<void>,
): Promise<{ refusedAt: number | undefined; lastAllowedAt: number; served: number }> {
  let refusedAt: number | undefined
  let lastAllowedAt = 0
  let served = 0
  let stop = false
  const traffic = (async () => {
    while (!stop) {
      const sentAt = Date.now()
      const status = (await rawRequest(url(), PROTECTED_PATH, headers)).status
      served++
      if (status === 401) refusedAt ??= sentAt
      else {
        assert.equal(status, 200)
        lastAllowedAt = sentAt
      }
      if (refusedAt !== undefined && sentAt - refusedAt > 300) break
      await sleep(5)
    }
  })()
  await sleep(1_200)
  await act()
  const deadline = Date.now() + 5_000
  while (refusedAt === undefined && Date.now() < deadline) await sleep(20)
  await sleep(400)
  stop = true
  await traffic
  return { refusedAt, lastAllowedAt, served }
}

/** When the change log recorded the last change of `kind` (the commit's own time). */
export function lastChangeAt(dataDir: string, kind: string): number {
  const db = new DatabaseSync(join(dataDir, 'tokengate.db'), { readOnly: true })
  try {
    const row = db
      .prepare('SELECT at FROM change_log WHERE kind = ? ORDER BY seq DESC LIMIT 1')
      .get(kind) as { at: number }
    return row.at
  } finally {
    db.close()
  }
}
