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
import { closeSync, constants, fstatSync, openSync, statSync, unlinkSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

export interface OwnerLock {
  /** The owner's id: random hex for a live writer, or the id of the dead owner claimed. */
  readonly owner: string
  /**
   * Lets go of the lock. `forget`: also delete the lock file, which only a holder whose owner
   * has no files left may do (a later claimer of a lock file that is gone finds nothing).
   */
  release(forget: boolean): void
}

export interface OwnerLockOptions {
  /** For tests: runs once the lock file is open, before it is locked (a race's window). */
  readonly beforeLock?: (path: string) => void
}

/** A new owner id in `dir` (which must exist), locked by this process until `release`. */
export function takeOwnerLock(dir: string, options: OwnerLockOptions = {}): OwnerLock {
  for (let tries = 1; ; tries++) {
    const lock = lockOwner(dir, randomBytes(8).toString('hex'), options)
    if (typeof lock === 'object') return lock
    // Held or gone: a recoverer held the fresh file for a moment (it found nothing, and
    // maybe forgot the file); another id. Only something broken refuses every fresh id.
    if (tries === 100) throw new Error(`no owner lock could be taken in ${dir} (${tries} ids)`)
  }
}

/**
 * Locks the owner's lock file (creating it if missing): undefined while the owner lives, or
 * when the file was forgotten while it was being locked (its owner was replayed).
 */
export function claimOwnerLock(
  dir: string,
  owner: string,
  options: OwnerLockOptions = {},
): OwnerLock | undefined {
  const lock = lockOwner(dir, owner, options)
  return typeof lock === 'object' ? lock : undefined
}

/**
 * The lock, or why not: 'held' by another connection, or 'gone': the file was unlinked (a
 * holder's `release(true)`) between its open and its lock. A lock on an unlinked file
 * excludes nobody: whoever opens the path later makes a new file and locks that one.
 */
function lockOwner(
  dir: string,
  owner: string,
  options: OwnerLockOptions,
): OwnerLock | 'held' | 'gone' {
  const path = join(dir, `${owner}.lock`)
  // Looked up when used, not imported: importing the package must not need node:sqlite, so
  // that an old Node reaches the version check (src/node-version.ts) instead of a link error.
  const { DatabaseSync } = process.getBuiltinModule('node:sqlite')
  // The file, held open from before SQLite opens it until after its lock is checked: while
  // it is open its inode cannot be reused, so the path naming it after the lock proves that
  // SQLite locked this file, and that it is still the owner's.
  const pinned = pinFile(path)
  const url = pathToFileURL(path)
  // Never created by SQLite: a path that vanished since the pin fails the open instead.
  url.searchParams.set('mode', 'rw')
  let db: InstanceType<typeof DatabaseSync> | undefined
  try {
    // No wait (timeout 0): a held lock answers SQLITE_BUSY at once.
    db = new DatabaseSync(url, { timeout: 0 })
    options.beforeLock?.(path)
    // Exclusive locking mode keeps the lock taken by the write transaction after it ends.
    db.exec('PRAGMA locking_mode = EXCLUSIVE')
    db.exec('BEGIN EXCLUSIVE')
    db.exec('COMMIT')
  } catch (error) {
    db?.close()
    // SQLite answers a file unlinked under it with an I/O error (SQLITE_IOERR_FSTAT) or
    // cannot open it: gone, not a failure.
    if (!namesPinned(path, pinned)) {
      closeSync(pinned.fd)
      return 'gone'
    }
    // The holder may be this process (another spool in it, or its own recovery): closing
    // any descriptor of the file would drop that holder's lock, so the pin is kept.
    parked.set(path, pinned)
    if ((error as { errcode?: number }).errcode === SQLITE_BUSY) return 'held'
    throw error
  }
  if (!namesPinned(path, pinned)) {
    closeSync(pinned.fd)
    db.close()
    return 'gone'
  }
  let held = true
  return {
    owner,
    release(forget) {
      if (!held) return
      held = false
      if (forget) unlinkQuietly(path)
      // Before SQLite lets go: once it has, another connection of this process could lock
      // the file, and closing the pin would then drop that connection's lock.
      closeSync(pinned.fd)
      db.close()
      // SQLite deletes its journal on close; one left by a killed holder goes with the file.
      if (forget) unlinkQuietly(`${path}-journal`)
    },
  }
}

const SQLITE_BUSY = 5

interface Pinned {
  readonly fd: number
  readonly dev: bigint
  readonly ino: bigint
}

/**
 * Pins of files that another connection of this process may hold (see `lockOwner`), by path.
 * A pin is closed once its path names another file or none: a holder unlinks the path only
 * as it lets go. At most one per lock file that is still there.
 */
const parked = new Map<string, Pinned>()

function pinFile(path: string): Pinned {
  let reused: Pinned | undefined
  for (const [parkedPath, pinned] of parked) {
    if (parkedPath === path && namesPinned(path, pinned)) {
      reused = pinned
    } else if (!namesPinned(parkedPath, pinned)) {
      closeSync(pinned.fd)
    } else {
      continue
    }
    parked.delete(parkedPath)
  }
  if (reused) return reused
  // Read-only is enough to pin it; created 0600 as the spool's other files.
  const fd = openSync(path, constants.O_RDONLY | constants.O_CREAT, 0o600)
  try {
    const { dev, ino } = fstatSync(fd, { bigint: true })
    return { fd, dev, ino }
  } catch (error) {
    closeSync(fd)
    throw error
  }
}

/** Whether `path` names the pinned file (a path once unlinked never names it again). */
function namesPinned(path: string, pinned: Pinned): boolean {
  try {
    const { dev, ino } = statSync(path, { bigint: true })
    return dev === pinned.dev && ino === pinned.ino
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw error
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path)
  } catch {}
}
