/**
 * Whether the store's writes succeed: disk trouble (a full disk, a read-only or failing one)
 * seen, shown and bounded (issue #32). Before, a full disk was invisible: `/readyz` said
 * `ready` while every flush logged a warning (136-153 lines in 30 s).
 *
 * Two signals, either starts an *episode*: a write that fails (audit events, last-used times,
 * usage counts: `trackStoreWrites`), and the data directory's free space below
 * `minFreeBytes` (read every `pollMs` with statfs, so a full disk shows within a second even
 * when no write is due). An episode logs ONE error line when it starts and one line when it
 * ends, never one per failed write; `/readyz` reports it (`storeWrites: "failing"`, degraded)
 * and the metrics count it. It ends when every failing kind of write succeeds again, the disk
 * has room and the disk reserve (disk-reserve.ts, SQLite) is in place again.
 *
 * What is written meanwhile is not lost: audit events stay in the audit spool and usage
 * counts in memory and the usage journal, and are written once space returns. On SQLite they
 * are not even tried while the disk is full or its reserve is not back: the room a given-up
 * reserve frees is kept for the next revocations, not filled by a backlog of audit events.
 */
import { statfsSync } from 'node:fs'
import { DISK_RESERVE_BYTES, ensureDiskReserve, hasDiskReserve } from './disk-reserve.ts'
import { withOverrides } from './store-overrides.ts'

export interface WriteHealthLog {
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
}

export interface WriteHealthState {
  /** An episode is under way: writes fail, or the data directory is (nearly) full. */
  readonly failing: boolean
  /** When the episode started (epoch ms), or undefined. */
  readonly since: number | undefined
  /** The failing writes' areas (`appendAudit`, `addUsage`, ...) and `disk` when full. */
  readonly areas: readonly string[]
  /** Failed writes since the process started. */
  readonly failures: number
  /** Episodes since the process started. */
  readonly episodes: number
}

export interface StoreWriteHealth {
  /**
   * Whether bulk writes are held back: the SQLite data directory is full or its disk reserve
   * is not back, so the room left (a given-up reserve included) is kept for revocations.
   */
  holding(): boolean
  failed(area: string, error: unknown): void
  succeeded(area: string): void
  state(): WriteHealthState
  close(): void
}

export interface StoreWriteHealthOptions {
  readonly log: WriteHealthLog
  /** The data directory whose free space is watched (and where the disk reserve lives). */
  readonly dataDir?: string | undefined
  /** Free space below which the disk counts as full. Default 1 MiB. */
  readonly minFreeBytes?: number | undefined
  /** Keep a disk reserve in `dataDir` (SQLite: revocations give it up on a full disk). */
  readonly reserve?: boolean | undefined
  /** How often the free space is read. Default 1000 ms; 0: never. */
  readonly pollMs?: number | undefined
  readonly now?: (() => number) | undefined
}

export function createStoreWriteHealth(options: StoreWriteHealthOptions): StoreWriteHealth {
  const { log, dataDir } = options
  const now = options.now ?? Date.now
  const minFree = options.minFreeBytes ?? 1024 * 1024
  const failingAreas = new Map<string, string>()
  let since: number | undefined
  let failures = 0
  let episodes = 0
  let failuresAtStart = 0

  const update = () => {
    if (failingAreas.size > 0 && since === undefined) {
      since = now()
      episodes++
      failuresAtStart = failures
      const [area, reason] = [...failingAreas.entries()][0] ?? ['', '']
      log.error(
        { area, reason, dataDir },
        'store writes failing (disk full or failing?): /readyz says degraded; audit events and usage counts are kept until they can be written',
      )
    } else if (failingAreas.size === 0 && since !== undefined) {
      log.warn(
        { seconds: Math.round((now() - since) / 1000), failedWrites: failures - failuresAtStart },
        'store writes succeed again',
      )
      since = undefined
    }
  }

  const reserve = options.reserve === true
  const checkDisk = () => {
    if (!dataDir) return
    let free: number
    try {
      const stats = statfsSync(dataDir)
      free = stats.bavail * stats.bsize
    } catch {
      return
    }
    // The episode lasts until the disk reserve a revocation gave up is back: until then
    // another revocation on this disk could fail.
    const reserved =
      !reserve ||
      hasDiskReserve(dataDir) ||
      (free >= DISK_RESERVE_BYTES + minFree && ensureDiskReserve(dataDir))
    if (free < minFree) failingAreas.set('disk', `${free} bytes free in the data directory`)
    else if (!reserved) failingAreas.set('disk', 'no room for the disk reserve')
    else failingAreas.delete('disk')
    update()
  }
  const pollMs = options.pollMs ?? 1000
  const timer = dataDir && pollMs > 0 ? setInterval(checkDisk, pollMs) : undefined
  timer?.unref()
  checkDisk()

  return {
    holding: () => reserve && failingAreas.has('disk'),
    failed(area, error) {
      failures++
      if (!failingAreas.has(area)) {
        failingAreas.set(area, error instanceof Error ? error.message : String(error))
        update()
      }
    },
    succeeded(area) {
      if (failingAreas.delete(area)) update()
    },
    state: () => ({
      failing: failingAreas.size > 0,
      since,
      areas: [...failingAreas.keys()],
      failures,
      episodes,
    }),
    close() {
      if (timer) clearInterval(timer)
    },
  }
}

/** The write-behind writes whose outcome is the store's write health. */
const TRACKED = ['appendAudit', 'recordPatUse', 'addUsage'] as const

/**
 * `store` with its write-behind writes reporting to `health`, and held back (failed at once,
 * so their writers keep them and retry) while `health.holding()`; every other property is the
 * store's own (methods bound to it).
 */
export function trackStoreWrites<T extends object>(store: T, health: StoreWriteHealth): T {
  const methods = store as unknown as Record<string, (...args: unknown[]) => unknown>
  const overrides: Record<string, unknown> = {}
  for (const name of TRACKED) {
    if (typeof methods[name] !== 'function') continue
    overrides[name] = (...args: unknown[]) =>
      (health.holding()
        ? Promise.reject(new Error('held: the data directory is full'))
        : Promise.resolve(methods[name]?.(...args))
      ).then(
        (result) => {
          health.succeeded(name)
          return result
        },
        (error: unknown) => {
          health.failed(name, error)
          throw error
        },
      )
  }
  return withOverrides(store, overrides as { readonly [K in keyof T]?: unknown })
}
