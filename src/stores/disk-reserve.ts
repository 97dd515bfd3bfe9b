/**
 * The disk reserve: a file of preallocated space in the data directory, given up so that a
 * revocation, a disable or a leak revocation succeeds on a full disk (issue #32: `pat revoke`
 * failed with "database or disk is full" and the key stayed valid). The server creates it at
 * start and again once a full disk has room; `withDiskReserve` deletes it when a write it
 * runs fails for want of space, then runs the write again, once.
 *
 * Why a file and not SQLite's own space: a full disk leaves SQLite no page to grow the WAL
 * by, and nothing in SQLite reserves pages for one kind of write. Other writes (audit
 * batches, usage) never use it: they wait in the spool and in memory until space returns.
 */
import { closeSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs'
import { dirname, join } from 'node:path'

export const DISK_RESERVE_FILE = 'tokengate.reserve'
/** Room for a revocation and its audit event many times over (WAL frames of 4 KiB pages). */
export const DISK_RESERVE_BYTES = 8 * 1024 * 1024

/** Whether the reserve is in `dataDir`. */
export function hasDiskReserve(dataDir: string): boolean {
  try {
    return statSync(join(dataDir, DISK_RESERVE_FILE)).size >= DISK_RESERVE_BYTES
  } catch {
    return false
  }
}

/** Creates the reserve in `dataDir` unless it is there; false when there was no room. */
export function ensureDiskReserve(dataDir: string, bytes = DISK_RESERVE_BYTES): boolean {
  const file = join(dataDir, DISK_RESERVE_FILE)
  try {
    if (statSync(file).size >= bytes) return true
  } catch {}
  const partial = `${file}.${process.pid}.tmp`
  let fd: number | undefined
  try {
    fd = openSync(partial, 'w', 0o600)
    const chunk = Buffer.alloc(1024 * 1024)
    for (let written = 0; written < bytes; written += chunk.length) writeSync(fd, chunk)
    closeSync(fd)
    fd = undefined
    renameSync(partial, file)
    return true
  } catch {
    if (fd !== undefined) closeSync(fd)
    rmSync(partial, { force: true })
    return false
  }
}

/** Whether `error` says the disk (or the database's file system) is full. */
export function isDiskFull(error: unknown): boolean {
  const e = error as { code?: unknown; errcode?: unknown; message?: unknown }
  return (
    e?.code === 'ENOSPC' ||
    e?.errcode === 13 ||
    (typeof e?.message === 'string' && /disk is full|SQLITE_FULL|ENOSPC/i.test(e.message))
  )
}

/**
 * Runs `write`; when it fails because the disk is full, gives up `store`'s disk reserve (a
 * SQLite store: the reserve beside its file) and runs it once more. `write` must be safe to
 * run again after a failure (one transaction, or an idempotent statement).
 */
export async function withDiskReserve<T>(store: object, write: () => Promise<T>): Promise<T> {
  try {
    return await write()
  } catch (error) {
    const file = (store as { file?: unknown }).file
    if (!isDiskFull(error) || typeof file !== 'string') throw error
    const reserve = join(dirname(file), DISK_RESERVE_FILE)
    try {
      statSync(reserve)
    } catch {
      throw error
    }
    rmSync(reserve, { force: true })
    return await write()
  }
}
