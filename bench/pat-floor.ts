/**
 * createTokengate's PAT target (issue #36: ≥ 1.0 of the naive SHA-256 + Map peer) beside its
 * floor from the same run: the naive peer answering what createTokengate answers an allowed PAT
 * (its request id, RateLimit pair and the bench app's body), nothing counted. What is left of
 * createTokengate under that floor is tokengate's own work; what is left of the floor under the
 * naive peer is the price of those bytes.
 */
import { type HopRow, perRepeat } from './hop-rows.ts'

/** bench/run.ts's server id of the floor (a ceiling row: never counted as the best peer). */
export const NAIVE_ANSWER = "fastify-naive-pat + createTokengate's answer"

const CASE = 'PAT single'

/** The three ratios, or nothing when the run left out one of the three rows. */
export function patFloorLines(rows: readonly HopRow[]): string[] {
  const of = (server: string) => rows.find((r) => r.case === CASE && r.server === server)
  const subject = of('tokengate createTokengate')
  const peer = of('fastify-naive-pat')
  const floor = of(NAIVE_ANSWER)
  if (!subject || !peer || !floor || peer.rps === 0 || floor.rps === 0) return []
  const line = (label: string, a: HopRow, b: HopRow, target: string) =>
    `| ${label} | ${(a.rps / b.rps).toFixed(2)} | ${perRepeat(a, b)} | ${target} |`
  return [
    `| ${CASE} (CPU 0) | ratio (medians) | per repeat | target |`,
    '|---|---:|---|---:|',
    line('createTokengate / naive peer', subject, peer, '1.0'),
    line(`floor: ${NAIVE_ANSWER} / naive peer`, floor, peer, '—'),
    line('createTokengate / floor', subject, floor, '—'),
    '',
  ]
}
