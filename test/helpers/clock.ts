import type { Clock } from '../../src/core/ports.ts'

/** 2026-01-15T12:00:00Z: "now" for tests that do not run on wall-clock time. */
export const NOW = Date.UTC(2026, 0, 15, 12, 0, 0)

export interface TestClock extends Clock {
  /** Jumps to `now` (epoch ms). */
  set(now: number): void
  advance(ms: number): void
}

/**
 * The one test clock. It starts at `start` (default NOW) and moves only when told; with
 * `'wall'` it follows wall-clock time plus what the test advances (a running server needs
 * real time for TLS and timers, while a test still moves token expiry forward).
 */
export function testClock(start: number | 'wall' = NOW): TestClock {
  const base = start === 'wall' ? () => Date.now() : () => start
  let offset = 0
  return {
    now: () => base() + offset,
    set(now) {
      offset = now - base()
    },
    advance(ms) {
      offset += ms
    },
  }
}
