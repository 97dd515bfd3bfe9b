/**
 * A local spool under the audit write-behind, so that a process killed between two flushes
 * (SIGKILL, OOM killer, a crashed worker) loses no audit event. Each event is appended to
 * the process's current segment (spool-files.ts) with one write(2) before `write()` returns;
 * a flush seals the segment it drains and deletes it once everything in it is stored.
 *
 * At start, each process replays the segments of owners that are gone, whatever their PIDs
 * were (owner-lock.ts: PID 1 in a container at every start). Stores skip ids they already
 * hold, so replaying what was stored before the kill duplicates nothing; a line that cannot be
 * read is recorded as `audit.dropped`.
 */
import { openSpoolFiles, recoverSpoolFiles } from './spool-files.ts'
import type { AppendAuditOptions, StoredAuditEvent } from './store.ts'
import { type AuditSpool, droppedEvent } from './write-behind.ts'

/** Opens this process's spool in `dir` (created 0700). */
export function openAuditSpool(dir: string): AuditSpool {
  const files = openSpoolFiles(dir)
  const sealed: string[] = []
  return {
    append(event) {
      files.append(`${JSON.stringify(event)}\n`)
    },
    seal() {
      const name = files.seal()
      if (name !== undefined) sealed.push(name)
    },
    release() {
      files.remove(sealed.splice(0))
    },
    close() {
      files.close()
    },
  }
}

export interface SpoolRecovery {
  /** Events read back from gone owners' segments and stored. */
  readonly recovered: number
  /** Lines that could not be read (recorded as one `audit.dropped` event). */
  readonly unreadable: number
}

/**
 * Stores what owners that are gone left in `dir`, then deletes their segments (each is
 * replayed by one process only: spool-files.ts). Rejects (leaving the segment for a later
 * recovery: the audit writer's `recoverSpool`, or the next start) when the store does not take
 * the events.
 */
export async function recoverAuditSpool(
  dir: string,
  store: {
    appendAudit(events: readonly StoredAuditEvent[], options?: AppendAuditOptions): Promise<void>
  },
  options: AppendAuditOptions & { now: () => number },
): Promise<SpoolRecovery> {
  // Only the store's own options reach the store (they may cross to its writer thread).
  const append: AppendAuditOptions = {
    ...(options.queue === undefined ? {} : { queue: options.queue }),
    ...(options.webhook === undefined ? {} : { webhook: options.webhook }),
  }
  let recovered = 0
  let unreadable = 0
  await recoverSpoolFiles(dir, async (_segment, text) => {
    const events: StoredAuditEvent[] = []
    for (const line of text.split('\n')) {
      if (line === '') continue
      try {
        events.push(JSON.parse(line) as StoredAuditEvent)
      } catch {
        unreadable++
      }
    }
    for (let i = 0; i < events.length; i += 500) {
      await store.appendAudit(events.slice(i, i + 500), append)
    }
    recovered += events.length
  })
  if (unreadable > 0) {
    await store.appendAudit(
      [droppedEvent(options.now(), { count: unreadable, reason: 'unreadable spool line' })],
      append,
    )
  }
  return { recovered, unreadable }
}
