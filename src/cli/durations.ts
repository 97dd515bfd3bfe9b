/** Units accepted in durations such as `90d`, `12h`, `30m`, `45s`, `2w`. */
const UNIT_MS = {
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
} as const

const DURATION = /^([1-9][0-9]{0,6})([smhdw])$/

/** Milliseconds in a day. */
export const DAY_MS = UNIT_MS.d

/**
 * Parses a positive duration (`<integer><unit>`, unit one of s, m, h, d, w) to milliseconds.
 * Returns undefined for anything else: `0d`, `1.5h`, `90`, `-1d`, ` 3d`.
 *
 * @example
 * parseDuration('90d') // 7_776_000_000
 */
export function parseDuration(text: string): number | undefined {
  const match = DURATION.exec(text)
  if (!match) return undefined
  return Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]
}

/** Formats milliseconds in the largest unit that divides them exactly: `90d`, `36h`, `1500ms`. */
export function formatDuration(ms: number): string {
  for (const unit of ['w', 'd', 'h', 'm', 's'] as const) {
    if (ms >= UNIT_MS[unit] && ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`
  }
  return `${ms}ms`
}
