/**
 * A process's append-only spool files in a directory shared with other processes (the workers
 * of one instance, the instance before a restart): what the audit spool and the usage journal
 * write before a request is answered, and what a later process replays if this one dies.
 *
 * Files are `<owner>.<seq>.jsonl` ("segments"); `<owner>` is held by `owner-lock.ts`, never a
 * PID. A segment is appended with one write(2) per call (the kernel holds it once `append`
 * returns, even if the process is SIGKILLed the next instant; a machine crash can still lose
 * what was not yet on disk: no fsync). Sealing starts the next segment; the owner deletes a
 * sealed segment once what it holds is stored.
 */
import {
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  unlinkSync,
  writeSync,
} from 'node:fs'
import { join } from 'node:path'
import { claimOwnerLock, takeOwnerLock } from './owner-lock.ts'

/**
 * `<owner>.<seq>.jsonl`, and the `<pid>-<hex>.jsonl[.replaying-<pid>]` segments of versions
 * before owner locks (each its own owner: no process ever held a lock for them).
 */
const SEGMENT = /^(?:([0-9a-f]{16})\.(\d+)|(\d+-[0-9a-f]+))\.jsonl(?:\.replaying-\d+)?$/
const LOCK = /^([0-9a-f]{16}|\d+-[0-9a-f]+)\.lock$/

export interface SpoolFiles {
  /** This process's owner id. */
  readonly owner: string
  /** Appends `text` to the current segment: one synchronous write(2). */
  append(text: string): void
  /** Seals the current segment if it holds anything and starts the next; its name, if sealed. */
  seal(): string | undefined
  /** Deletes sealed segments whose content is stored. */
  remove(names: Iterable<string>): void
  /**
   * Ends this owner: deletes the current segment if empty (else seals it for the next process
   * to replay), and drops the lock, with its file once no segment of ours is left.
   */
  close(): void
}

/** Opens a new owner's spool in `dir` (created 0700). */
export function openSpoolFiles(dir: string): SpoolFiles {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const lock = takeOwnerLock(dir)
  const kept = new Set<string>()
  let seq = 0
  let name = ''
  let fd = -1
  let empty = true
  let closed = false
  const start = () => {
    name = `${lock.owner}.${++seq}.jsonl`
    empty = true
    try {
      fd = openSync(join(dir, name), 'a', 0o600)
    } catch (error) {
      // E.g. a full disk: appends then throw (their callers go on without the spool).
      fd = -1
      if (seq === 1) throw error
    }
  }
  start()
  return {
    owner: lock.owner,
    append(text) {
      const written = writeSync(fd, text)
      empty = false
      // A short write (a full disk) leaves a torn line at the end: nothing may follow it.
      // (UTF-8 has at least as many bytes as the string has UTF-16 units.)
      if (written !== text.length && written < Buffer.byteLength(text)) {
        throw new Error(`spool ${name}: short write (disk full?)`)
      }
    },
    seal() {
      // A segment that could not be opened (a full disk) is tried again at each seal.
      if (empty && fd === -1) start()
      if (empty) return undefined
      const sealed = name
      if (fd !== -1) closeSync(fd)
      kept.add(sealed)
      start()
      return sealed
    },
    remove(names) {
      for (const old of names) {
        if (kept.delete(old)) unlinkQuietly(join(dir, old))
      }
    },
    close() {
      if (closed) return
      closed = true
      if (fd !== -1) closeSync(fd)
      fd = -1
      if (empty) unlinkQuietly(join(dir, name))
      else kept.add(name)
      lock.release(kept.size === 0)
    },
  }
}

/**
 * Replays the segments of every owner in `dir` that is gone (its lock can be taken), oldest
 * first per owner, and deletes each once `replay` resolved. An owner's lock is held while its
 * segments are replayed, so two processes starting together never both replay one; a process
 * that dies while replaying lets go of it, and the next start replays what is left (so
 * `replay` must be idempotent per segment). When `replay` rejects or an owner's lock cannot be
 * taken, that owner's segments are left for a later start, the other owners are still replayed,
 * and then the first error is thrown.
 *
 * @returns the number of segments replayed
 */
export async function recoverSpoolFiles(
  dir: string,
  replay: (segment: string, text: string) => Promise<void>,
): Promise<number> {
  let names: string[]
  try {
    names = readdirSync(dir)
  } catch {
    return 0
  }
  const owners = new Set<string>()
  for (const name of names) {
    const owner = ownerOf(name) ?? LOCK.exec(name)?.[1]
    if (owner !== undefined) owners.add(owner)
  }
  let replayed = 0
  // The first failure, thrown once every other owner had its turn: a lock file SQLite refuses
  // or a store that refused one segment used to end the walk, and the gone owners after it
  // waited for the next start.
  let failed: { error: unknown } | undefined
  for (const owner of owners) {
    let lock: ReturnType<typeof claimOwnerLock>
    try {
      lock = claimOwnerLock(dir, owner)
    } catch (error) {
      failed ??= { error }
      continue
    }
    if (lock === undefined) continue // alive, or another process is replaying it
    let done = false
    try {
      // Listed again under the lock: a process that replayed them first deleted them.
      const segments = readdirSync(dir)
        .filter((name) => ownerOf(name) === owner)
        .sort((a, b) => seqOf(a) - seqOf(b))
      for (const segment of segments) {
        await replay(
          segment.replace(/\.replaying-\d+$/, ''),
          readFileSync(join(dir, segment), 'utf8'),
        )
        unlinkQuietly(join(dir, segment))
        replayed++
      }
      done = true
    } catch (error) {
      failed ??= { error }
    } finally {
      lock.release(done)
    }
  }
  if (failed) throw failed.error
  return replayed
}

function ownerOf(name: string): string | undefined {
  const match = SEGMENT.exec(name)
  return match ? (match[1] ?? match[3]) : undefined
}

function seqOf(name: string): number {
  return Number(SEGMENT.exec(name)?.[2] ?? 0)
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path)
  } catch {}
}
