/**
 * A steady caller through a proxy that keeps decisions (nginx-cache.test.ts,
 * nginx-lua.test.ts): what the < 1 s revocation promise is measured with.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { setTimeout as sleep } from 'node:timers/promises'
import { Worker } from 'node:worker_threads'
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

/** What `nextCommit` learned of a commit. */
export interface Commit {
  /**
   * The latest time the commit is known not to have happened yet (epoch ms): the change
   * log's own time for it or the start of the last read that did not see it, whichever is
   * later. What the bound is measured from: never after the commit.
   */
  readonly after: number
  /** The change log's time: stamped inside the transaction, before its commit's fsync. */
  readonly at: number
  /** When a read first saw it. */
  readonly seenAt: number
}

/**
 * Watches the change log for the next change of `kind` another process commits. Why not the
 * log's own time: it is taken before the commit, whose fsync took hundreds of ms on a loaded
 * machine, and a change is in force from its commit. A worker thread reads with a connection
 * of its own every millisecond (this thread also serves tokengate: its lag would blur the
 * times). Call it before the change is made.
 */
export function nextCommit(dataDir: string, kind: string, timeoutMs = 10_000): Promise<Commit> {
  const file = join(dataDir, 'tokengate.db')
  const db = new DatabaseSync(file, { readOnly: true })
  let seq: number
  try {
    const row = db.prepare('SELECT max(seq) AS seq FROM change_log WHERE kind = ?').get(kind)
    seq = Number(row?.seq ?? 0)
  } finally {
    db.close()
  }
  const worker = new Worker(WATCH_COMMIT, {
    eval: true,
    workerData: { file, kind, seq, until: Date.now() + timeoutMs },
  })
  return new Promise((resolve, reject) => {
    worker.once('message', (commit: Commit | null) => {
      if (commit) resolve(commit)
      else reject(new Error(`no ${kind} change committed within ${timeoutMs} ms`))
    })
    worker.once('error', reject)
  })
}

const WATCH_COMMIT = `
const { parentPort, workerData } = require('node:worker_threads')
const { DatabaseSync } = require('node:sqlite')
const { file, kind, seq, until } = workerData
const db = new DatabaseSync(file, { readOnly: true })
const next = db.prepare('SELECT at FROM change_log WHERE kind = ? AND seq > ? ORDER BY seq LIMIT 1')
const pause = new Int32Array(new SharedArrayBuffer(4))
let missed = 0
for (;;) {
  const startedAt = Date.now()
  const row = next.get(kind, seq)
  if (row) {
    const at = Number(row.at)
    parentPort.postMessage({ after: Math.max(at, missed), at, seenAt: Date.now() })
    break
  }
  missed = startedAt
  if (startedAt > until) {
    parentPort.postMessage(null)
    break
  }
  Atomics.wait(pause, 0, 0, 1)
}
db.close()
`
