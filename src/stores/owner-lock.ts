/**
 * Who owns a spool's files, told without PIDs: each writing process holds an exclusive lock on
 * its own `<owner>.lock` file for as long as it lives, and the kernel drops the lock when the
 * process dies, however it dies (SIGKILL, OOM killer). A later process that can take the lock
 * knows the owner is gone, and while it holds the lock nobody else can take it: claiming and
 * replaying a dead owner's files happens exactly once, whatever the PIDs were. (PIDs lie in
 * containers: every start is PID 1 again, and on a host PID 1 is always alive.)
 *
 * Why SQLite: it takes POSIX record locks (fcntl) that the kernel releases with the process, and
 * also refuses a second connection of the same process; Node has no flock(2) of its own, and a
 * timed lease would guess. The lock file is a tiny SQLite database nobody writes to.
 */
import { randomBytes } from 'node:crypto'
import { unlinkSync } from 'node:fs'
import { join } from 'node:path'

export interface OwnerLock {
  /** The owner's id: random hex for a live writer, or the id of the dead owner claimed. */
  readonly owner: string
  /**
   * Lets go of the lock. `forget`: also delete the lock file, which only a holder whose owner
   * has no files left may do (a later claimer of a lock file that is gone finds nothing).
   */
  release(forget: boolean): void
}

/** A new owner id in `dir` (which must exist), locked by this process until `release`. */
export function takeOwnerLock(dir: string): OwnerLock {
  for (;;) {
    const lock = lockOwner(dir, randomBytes(8).toString('hex'))
    // Taken: a recoverer held the fresh file for a moment (it found nothing); try another id.
    if (lock) return lock
  }
}

/** Locks the owner's lock file (creating it if missing): undefined while the owner lives. */
export function claimOwnerLock(dir: string, owner: string): OwnerLock | undefined {
  return lockOwner(dir, owner)
}

function lockOwner(dir: string, owner: string): OwnerLock | undefined {
  const path = join(dir, `${owner}.lock`)
  // Looked up when used, not imported: importing the package must not need node:sqlite, so
  // that an old Node reaches the version check (src/node-version.ts) instead of a link error.
  const { DatabaseSync } = process.getBuiltinModule('node:sqlite')
  // No wait (timeout 0): a held lock answers SQLITE_BUSY at once.
  const db = new DatabaseSync(path, { timeout: 0 })
  try {
    // Exclusive locking mode keeps the lock taken by the write transaction after it ends.
    db.exec('PRAGMA locking_mode = EXCLUSIVE')
    db.exec('BEGIN EXCLUSIVE')
    db.exec('COMMIT')
  } catch (error) {
    db.close()
    if ((error as { errcode?: number }).errcode === SQLITE_BUSY) return undefined
    throw error
  }
  let held = true
  return {
    owner,
    release(forget) {
      if (!held) return
      held = false
      if (forget) unlinkQuietly(path)
      db.close()
      // SQLite deletes its journal on close; one left by a killed holder goes with the file.
      if (forget) unlinkQuietly(`${path}-journal`)
    },
  }
}

const SQLITE_BUSY = 5

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path)
  } catch {}
}
