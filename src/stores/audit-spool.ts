/**
 * A local spool under the audit write-behind, so that a process killed between two flushes
 * (SIGKILL, OOM killer, a crashed worker) loses no audit event. Each event is appended to
 * the process's current segment file with one write(2) before `write()` returns; the kernel
 * then holds it even if the process dies the next instant (a machine crash can still lose
 * what was not yet on disk: no fsync per event). A flush seals the segment it drains and
 * deletes it once everything in it is stored.
 *
 * Segments are named `<pid>-<random>.jsonl`. At start, each process replays the segments of
 * processes that are gone (stores skip ids they already hold, so replaying what was stored
 * before the kill duplicates nothing) and records a line it cannot read as `audit.dropped`.
 */
import { randomBytes } from 'node:crypto'
import {
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs'
import { join } from 'node:path'
import type { AppendAuditOptions, StoredAuditEvent } from './store.ts'
import { type AuditSpool, droppedEvent } from './write-behind.ts'

const SEGMENT = /^(\d+)-[0-9a-f]+\.jsonl(?:\.replaying-(\d+))?$/

/** Opens this process's spool in `dir` (created 0700). */
export function openAuditSpool(dir: string): AuditSpool {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  let path = ''
  let fd = -1
  let written = 0
  const sealed: string[] = []
  const start = () => {
    path = join(dir, `${process.pid}-${randomBytes(6).toString('hex')}.jsonl`)
    fd = openSync(path, 'a', 0o600)
    written = 0
  }
  start()
  return {
    append(event) {
      writeSync(fd, `${JSON.stringify(event)}\n`)
      written++
    },
    seal() {
      if (written === 0) return
      closeSync(fd)
      sealed.push(path)
      start()
    },
    release() {
      for (const old of sealed.splice(0)) unlinkQuietly(old)
    },
    close() {
      closeSync(fd)
      unlinkQuietly(path)
    },
  }
}

export interface SpoolRecovery {
  /** Events read back from dead processes' segments and stored. */
  readonly recovered: number
  /** Lines that could not be read (recorded as one `audit.dropped` event). */
  readonly unreadable: number
}

/**
 * Stores what dead processes left in `dir`, then deletes their segments. A segment is
 * claimed by renaming it first, so two processes starting together never both replay it.
 * Rejects (leaving the segment for the next start) when the store does not take the events.
 */
export async function recoverAuditSpool(
  dir: string,
  store: {
    appendAudit(events: readonly StoredAuditEvent[], options?: AppendAuditOptions): Promise<void>
  },
  options: AppendAuditOptions & { now: () => number },
): Promise<SpoolRecovery> {
  // Only the store's own options reach the store (they may cross to its writer thread).
  const append: AppendAuditOptions = options.queue === undefined ? {} : { queue: options.queue }
  let names: string[]
  try {
    names = readdirSync(dir)
  } catch {
    return { recovered: 0, unreadable: 0 }
  }
  let recovered = 0
  let unreadable = 0
  for (const name of names) {
    const match = SEGMENT.exec(name)
    if (!match) continue
    const owner = Number(match[2] ?? match[1])
    if (owner === process.pid || alive(owner)) continue
    const claimed = join(dir, `${name.replace(/\.replaying-\d+$/, '')}.replaying-${process.pid}`)
    try {
      renameSync(join(dir, name), claimed)
    } catch {
      continue // another process claimed it first
    }
    const events: StoredAuditEvent[] = []
    for (const line of readFileSync(claimed, 'utf8').split('\n')) {
      if (line === '') continue
      try {
        events.push(JSON.parse(line) as StoredAuditEvent)
      } catch {
        unreadable++
      }
    }
    try {
      for (let i = 0; i < events.length; i += 500) {
        await store.appendAudit(events.slice(i, i + 500), append)
      }
    } catch (error) {
      renameSync(claimed, join(dir, name.replace(/\.replaying-\d+$/, '')))
      throw error
    }
    recovered += events.length
    unlinkQuietly(claimed)
  }
  if (unreadable > 0) {
    await store.appendAudit(
      [droppedEvent(options.now(), { count: unreadable, reason: 'unreadable spool line' })],
      append,
    )
  }
  return { recovered, unreadable }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path)
  } catch {}
}
