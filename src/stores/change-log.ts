/**
 * Following the change log, for both stores. Every change another process may have cached
 * (a PAT revoked or edited, a tenant or issuer written, the stored gateway policy) is a row
 * `(seq, kind, subject, at)` written by a trigger in the same transaction (migration 7 of
 * each dialect); numbers are drawn in commit order. Each process remembers the last number
 * it applied and reads what follows: when woken (Postgres NOTIFY, its own write), on every
 * poll tick, and after reconnecting. NOTIFY carries nothing we rely on, so a notification
 * lost to a dropped connection, or never delivered (PgBouncer in transaction pooling), costs
 * at most one poll interval, never a missed revocation.
 *
 * When the log cannot be read (the store is down, a read hangs), nothing cached can be
 * trusted: the follower emits `resync` once, so caches drop what they would serve without the
 * store (PATs then fail closed), and catches up by sequence when the store answers again.
 */
import type { StoreChange } from './store.ts'

/** One row of the change log. `subject` names the object in its kind's own terms. */
export interface LogEntry {
  readonly seq: number
  readonly kind: string
  readonly subject: string
  /** Epoch ms of the write. */
  readonly at: number
}

/**
 * What each kind of entry means to a process, in one table: adding a kind is a trigger (or
 * a store method writing the row) and one line here. A kind this version does not know
 * (written by a newer one during a rolling upgrade) becomes `resync`: dropping every cache is
 * always safe, ignoring a change could keep a revoked token valid.
 */
const KINDS: Readonly<Record<string, (subject: string) => StoreChange>> = {
  pat: (tokenHash) => ({ kind: 'pat_changed', tokenHash }),
  tenant: (id) => ({ kind: 'tenant_changed', id }),
  issuer: () => ({ kind: 'issuers_changed' }),
  policy: (name) => ({ kind: 'policy_changed', name }),
  jwt_revocation: (id) => ({ kind: 'jwt_revocation_changed', id }),
}

export function toStoreChange(entry: Pick<LogEntry, 'kind' | 'subject'>): StoreChange {
  return Object.hasOwn(KINDS, entry.kind)
    ? (KINDS[entry.kind] as (subject: string) => StoreChange)(entry.subject)
    : { kind: 'resync' }
}

/** How long log rows are kept. A process disconnected for longer resyncs instead. */
export const CHANGE_LOG_RETENTION_MS = 86_400_000

/** The two queries a follower needs; each dialect writes its own SQL. */
export interface ChangeLogReader {
  /** The highest sequence number written so far; 0 when the log is empty or absent. */
  head(): Promise<number>
  /**
   * Entries after `seq`, ascending, at most `limit`, and the lowest number still kept (null
   * when there is no entry after `seq`): entries between `seq` and it were pruned.
   */
  readAfter(seq: number, limit: number): Promise<{ entries: LogEntry[]; lowest: number | null }>
  /** Deletes entries written before `before` (epoch ms). */
  prune(before: number): Promise<void>
}

export interface ChangeFollowerOptions {
  readonly reader: ChangeLogReader
  readonly emit: (change: StoreChange) => void
  /** Interval of the catch-up poll while someone watches, in ms. Default 500; 0: no poll. */
  readonly pollMs?: number | undefined
  /** A catch-up slower than this counts as a failure (resync). Default 3000. */
  readonly timeoutMs?: number | undefined
  readonly warn?: ((obj: object, msg: string) => void) | undefined
  readonly now?: () => number
}

export interface ChangeFollowerStatus {
  /** The last sequence number applied (emitted), or undefined before the first read. */
  readonly lastSeq: number | undefined
  /** False from a failed or hung catch-up until the next successful one. */
  readonly current: boolean
  /**
   * Epoch ms at which the last successful catch-up started: every change committed before it
   * has been emitted. Undefined before the first one. What a cached decision's expiry is
   * bound to (decision/cache-expiry.ts).
   */
  readonly readAsOf: number | undefined
}

const BATCH = 1000
const PRUNE_EVERY_MS = 600_000

/** Follows a change log by sequence; see the file comment. */
export class ChangeFollower {
  readonly #options: ChangeFollowerOptions
  readonly #pollMs: number
  readonly #timeoutMs: number
  readonly #now: () => number
  #last: number | undefined
  #started: Promise<void> | undefined
  #current = true
  #timer: NodeJS.Timeout | undefined
  #running: Promise<void> = Promise.resolve()
  #next: Promise<void> | undefined
  #readStartedAt: number | undefined
  #rewindTo: number | undefined
  #readAsOf: number | undefined
  #prunedAt = 0
  #closed = false

  constructor(options: ChangeFollowerOptions) {
    this.#options = options
    this.#pollMs = options.pollMs ?? 500
    this.#timeoutMs = options.timeoutMs ?? 3000
    this.#now = options.now ?? Date.now
  }

  /** `readAsOf` while the log is readable, else undefined; allocates nothing (per decision). */
  get currentAsOf(): number | undefined {
    return this.#current ? this.#readAsOf : undefined
  }

  get status(): ChangeFollowerStatus {
    return { lastSeq: this.#last, current: this.#current, readAsOf: this.#readAsOf }
  }

  /**
   * Starts from the log's head as it is when called (what was written before is in every
   * fresh read). Idempotent; a failed attempt is retried by the next call or catch-up.
   */
  start(): Promise<void> {
    this.#started ??= this.#options.reader.head().then(
      (head) => {
        this.#last ??= head
      },
      (error: unknown) => {
        this.#started = undefined
        throw error
      },
    )
    return this.#started
  }

  /**
   * Emits every entry after `seq`, even those already emitted: a reader that took a snapshot
   * as of `seq` then misses none, whenever this follower started. Applied at the start of
   * the next read (reads run one at a time), so it cannot interleave with one in flight.
   */
  followFrom(seq: number): Promise<void> {
    this.#rewindTo = Math.min(this.#rewindTo ?? seq, seq)
    return this.catchUp()
  }

  /** Polls while `on` (someone watches). */
  poll(on: boolean): void {
    if (!on || this.#closed) {
      clearInterval(this.#timer)
      this.#timer = undefined
      return
    }
    if (this.#timer || this.#pollMs <= 0) return
    this.#timer = setInterval(() => this.#tick(), this.#pollMs)
    this.#timer.unref()
  }

  /**
   * Reads and emits everything after the last applied entry. Resolves once every entry
   * committed before the call has been emitted; concurrent calls share one read that starts
   * after the call. Never rejects: a failure is handled as described above.
   */
  catchUp(): Promise<void> {
    if (this.#closed) return Promise.resolve()
    this.#next ??= this.#running.then(() => {
      this.#next = undefined
      return this.#read()
    })
    this.#running = this.#next
    return this.#next
  }

  close(): void {
    this.#closed = true
    this.poll(false)
  }

  #tick(): void {
    const started = this.#readStartedAt
    if (started !== undefined && this.#now() - started > this.#timeoutMs) {
      this.#unsure(new Error(`change log read still running after ${this.#timeoutMs} ms`))
    }
    void this.catchUp()
    if (this.#now() - this.#prunedAt > PRUNE_EVERY_MS) {
      this.#prunedAt = this.#now()
      this.#options.reader.prune(this.#now() - CHANGE_LOG_RETENTION_MS).catch(() => {})
    }
  }

  async #read(): Promise<void> {
    if (this.#closed) return
    const startedAt = this.#now()
    this.#readStartedAt = startedAt
    try {
      await this.start()
      if (this.#rewindTo !== undefined) {
        if (this.#rewindTo < (this.#last as number)) this.#last = this.#rewindTo
        this.#rewindTo = undefined
      }
      for (;;) {
        const after = this.#last as number
        const { entries, lowest } = await this.#options.reader.readAfter(after, BATCH)
        if (this.#closed) return
        // Entries we never applied were pruned (a long disconnection): start over.
        if (lowest !== null && lowest > after + 1 && after > 0) this.#emit({ kind: 'resync' })
        let resynced = false
        for (const entry of entries) {
          const change = toStoreChange(entry)
          if (change.kind !== 'resync') this.#emit(change)
          else if (!resynced) {
            resynced = true
            this.#emit(change)
          }
          this.#last = entry.seq
        }
        if (entries.length < BATCH) break
      }
      this.#readAsOf = startedAt
      this.#recovered()
    } catch (error) {
      this.#unsure(error)
    } finally {
      this.#readStartedAt = undefined
    }
  }

  #recovered(): void {
    if (this.#current) return
    this.#current = true
    this.#options.warn?.({}, 'store change log readable again; caught up by sequence')
  }

  #unsure(error: unknown): void {
    if (!this.#current) return
    this.#current = false
    this.#options.warn?.(
      { err: error },
      'store change log unreadable; dropping caches until it can be read again',
    )
    this.#emit({ kind: 'resync' })
  }

  #emit(change: StoreChange): void {
    this.#options.emit(change)
  }
}
