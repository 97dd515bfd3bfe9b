/**
 * One warn line per misconfiguration episode, naming the setting to change: the first
 * occurrence is logged at once, then at most one line per `quietMs` while it goes on, with
 * how many times it happened since. Every request of a misconfigured proxy hits the same
 * problem, so a line per request would bury the one line that says what to fix.
 */
export interface Diagnostics {
  /** `kind` is one of a few fixed strings (it keys the episode); `fields` go on the line. */
  warn(kind: string, fields: Record<string, unknown>, message: string): void
}

export function createDiagnostics(
  logger: { warn(fields: object, message: string): void },
  now: () => number = Date.now,
  quietMs = 60_000,
): Diagnostics {
  const episodes = new Map<string, { loggedAt: number; since: number }>()
  return {
    warn(kind, fields, message) {
      const at = now()
      const episode = episodes.get(kind)
      if (episode && at - episode.loggedAt < quietMs) {
        episode.since++
        return
      }
      const repeated = episode ? { repeatedSinceLastLine: episode.since } : {}
      episodes.set(kind, { loggedAt: at, since: 0 })
      logger.warn({ diagnostic: kind, ...fields, ...repeated }, message)
    },
  }
}
