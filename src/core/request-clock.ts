/**
 * The system clock, read once per request: the gate pins the time when a request comes in and
 * everything it calls before it answers or waits (the lookup cache, the PAT checks, the
 * limiter, the recorder's last-used time, the usage count) reads that one instant instead of
 * calling `Date.now()` again at each.
 * Unpinned (timers, code after an await, callers outside the gate) it is the system clock.
 * A test's own `Clock` is never wrapped: a controlled time stays the test's.
 */
import type { Clock } from './ports.ts'

export class RequestClock implements Clock {
  // Undefined when unpinned, not a number: a field that only ever holds numbers keeps them
  // unboxed, so each `now()` boxed a new heap number (several per request); a field that also
  // holds undefined keeps the one heap number `Date.now()` made, and every read hands it back.
  #pinned: number | undefined = undefined

  /** The pinned time while a request is decided synchronously, else `Date.now()`. */
  readonly now = (): number => this.#pinned ?? Date.now()

  /**
   * Reads the clock for the request starting now. False (and nothing changed) when a caller
   * further out has pinned it already: only the one that pinned releases.
   */
  pin(): boolean {
    if (this.#pinned !== undefined) return false
    this.#pinned = Date.now()
    return true
  }

  /** The request answered or waits: reads are the system clock's again. */
  release(): void {
    this.#pinned = undefined
  }
}
