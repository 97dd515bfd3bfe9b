/**
 * Deadlines of in-flight exchanges that all share one timeout, on one timer.
 *
 * Why not a `setTimeout` per exchange: every proxied request armed and cleared one (a
 * `Timeout` object, its async id, a list insert and an unenroll), issue #36. With one
 * timeout for all, arrival order is deadline order, so a FIFO list holds them sorted: an
 * entry is appended at `add`, unlinked in O(1) at `remove`, and one timer is armed for the
 * oldest deadline only, moved forward when it fires. The timer is not cleared when entries
 * leave (it is re-armed for the next oldest, or not at all, when it fires) and is unref'd:
 * an exchange in flight keeps the process alive by its sockets, not by this timer.
 */

/** What the list links; the fields are the list's, not the entry's owner's. */
export interface DeadlineEntry {
  /** When the entry expires (`now()` milliseconds); set by `add`. */
  deadlineAt: number
  deadlinePrevious: DeadlineEntry | null
  deadlineNext: DeadlineEntry | null
  /** Whether the entry is in a list (added, not removed or expired yet). */
  deadlineQueued: boolean
  /** Called once, when the entry's deadline has passed; it has left the list already. */
  onDeadline(): void
}

/** The monotonic clock the deadlines are read on (milliseconds). */
export type DeadlineClock = () => number

export class Deadlines {
  readonly #timeoutMs: number
  readonly #now: DeadlineClock
  #head: DeadlineEntry | null = null
  #tail: DeadlineEntry | null = null
  #size = 0
  #timer: NodeJS.Timeout | undefined
  /** When the armed timer fires (`now()` ms), or `Infinity` when none is armed. */
  #firesAt = Number.POSITIVE_INFINITY

  constructor(timeoutMs: number, now: DeadlineClock = () => performance.now()) {
    if (!(timeoutMs > 0)) throw new RangeError('timeoutMs must be a positive number')
    this.#timeoutMs = timeoutMs
    this.#now = now
  }

  /** Entries in the list. */
  get size(): number {
    return this.#size
  }

  /** Adds `entry`, to expire `timeoutMs` from now (an entry in the list already is moved). */
  add(entry: DeadlineEntry): void {
    if (entry.deadlineQueued) this.remove(entry)
    entry.deadlineAt = this.#now() + this.#timeoutMs
    entry.deadlinePrevious = this.#tail
    entry.deadlineNext = null
    entry.deadlineQueued = true
    if (this.#tail) this.#tail.deadlineNext = entry
    else this.#head = entry
    this.#tail = entry
    this.#size++
    // Only a list that was empty (or a timer that fell behind) needs arming: otherwise the
    // armed timer is due at or before this deadline.
    if (this.#firesAt === Number.POSITIVE_INFINITY) this.#arm(entry.deadlineAt)
  }

  /** Takes `entry` out; it will not expire. Harmless when it is not in the list. */
  remove(entry: DeadlineEntry): void {
    if (!entry.deadlineQueued) return
    entry.deadlineQueued = false
    const { deadlinePrevious: previous, deadlineNext: next } = entry
    if (previous) previous.deadlineNext = next
    else this.#head = next
    if (next) next.deadlinePrevious = previous
    else this.#tail = previous
    entry.deadlinePrevious = null
    entry.deadlineNext = null
    this.#size--
  }

  /** Stops the timer and forgets every entry (none expires). */
  clear(): void {
    clearTimeout(this.#timer)
    this.#timer = undefined
    this.#firesAt = Number.POSITIVE_INFINITY
    while (this.#head) this.remove(this.#head)
  }

  #arm(at: number): void {
    this.#firesAt = at
    // One timer at a time: re-armed when it fires, never per entry.
    clearTimeout(this.#timer)
    this.#timer = setTimeout(this.#fire, Math.max(1, Math.ceil(at - this.#now())))
    this.#timer.unref()
  }

  readonly #fire = (): void => {
    this.#firesAt = Number.POSITIVE_INFINITY
    const now = this.#now()
    // Expired entries leave before their callbacks run, so a callback may add or remove
    // entries (its own exchange's, another's) safely.
    let entry = this.#head
    while (entry !== null && entry.deadlineAt <= now) {
      this.remove(entry)
      try {
        entry.onDeadline()
      } catch (error) {
        // One failing callback must not strand the rest: they are re-armed, then it throws.
        if (this.#head) this.#arm(this.#head.deadlineAt)
        throw error
      }
      entry = this.#head
    }
    if (entry !== null && this.#firesAt === Number.POSITIVE_INFINITY) this.#arm(entry.deadlineAt)
  }
}
