/**
 * The tables bench/latency.bench.ts prints (Markdown): per case, each round's percentiles and
 * added latency; then the medians of the rounds with the per-round values beside them. Each run
 * also says how much of CPU 0 other processes took during it: a round where others held a
 * large share measured the machine (issue #36, fourth session).
 */
import type { LatencyCase } from './latency-cases.ts'
import type { LatencyRun } from './latency-load.ts'
import type { ServerId } from './latency-servers.ts'
import { median } from './latency-stats.ts'

export interface Measured {
  readonly run: LatencyRun
  /** Syncs the server asked for during the run (warm-up included), in slow-disk mode. */
  readonly syncs?: number
  /**
   * Percent of the servers' CPU the bench's own pinned processes used during the run (this
   * row's path: its servers and the upstream, plus the other rows' idle ones): how busy the
   * core a p99 queued on was (bench/latency-machine.ts).
   */
  readonly ours?: number
  /** Percent of the servers' CPU other processes used during the run (bench/latency-machine.ts). */
  readonly others?: number
  /** The busiest of them, `name pid %` (`*`: allowed on other CPUs too, so an upper bound). */
  readonly otherNames?: string
  /** Percent of the servers' CPU in interrupts and softirq (whoever's; inside `others` or ours). */
  readonly softirq?: number
}

export interface CaseResult {
  readonly benchCase: LatencyCase
  /** The server whose saturation set the rate, and that saturation (2xx/s). */
  readonly saturatedServer: ServerId
  readonly saturation: number
  readonly rate: number
  /** Per round, by server. */
  readonly rounds: Map<ServerId, Measured>[]
}

/** How the rates were chosen and the load sent, for the table titles. */
export interface RunSettings {
  /** The generator of fixed-token cases (token-rotating ones always use the paced one). */
  readonly generator: string
  readonly load: number
  readonly fixedRate: number | undefined
}

export const ms = (value: number) => (Number.isNaN(value) ? '-' : value.toFixed(3))
const signed = (value: number) =>
  Number.isNaN(value) ? '-' : `${value >= 0 ? '+' : ''}${value.toFixed(3)}`
const percent = (value: number | undefined) =>
  value === undefined || Number.isNaN(value) ? '-' : `${Math.round(value)} %`
export const count = (value: number) => Math.round(value).toLocaleString('en')

export function otherAnswers(run: LatencyRun): string {
  const parts = Object.entries(run.non2xx).map(([status, n]) => `${n}×${status}`)
  if (run.failed > 0) parts.push(`${run.failed} failed`)
  return parts.join(', ') || '0'
}

export function printCase(result: CaseResult, settings: RunSettings, withSyncs: boolean): void {
  const { benchCase, rate, saturation: sat, saturatedServer, rounds } = result
  const generator = benchCase.traffic.kind === 'fixed' ? settings.generator : 'paced'
  const why = settings.fixedRate
    ? 'fixed'
    : `${settings.load * 100} % of ${saturatedServer}'s ${count(sat)} 2xx/s`
  console.log(`\n### ${benchCase.id}: ${count(rate)} req/s (${why}), ${generator}\n`)
  const syncHeader = withSyncs ? ' syncs |' : ''
  console.log(
    `| round | server | p50 ms | p99 ms | p99.9 ms | max ms | 2xx | not 2xx | gen late p99 | bench on CPU 0 | others on CPU 0 (busiest: name pid %) | softirq on CPU 0 |${syncHeader} added p50 | added p99 | added p99.9 |`,
  )
  console.log(
    `|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|${withSyncs ? '---:|' : ''}---:|---:|---:|`,
  )
  const servers = [benchCase.subject, ...benchCase.others, benchCase.baseline]
  rounds.forEach((measured, round) => {
    const base = measured.get(benchCase.baseline)?.run.summary
    for (const id of servers) {
      const m = measured.get(id)
      if (!m || !base) continue
      const s = m.run.summary
      const isBase = id === benchCase.baseline
      const added = (a: number, b: number) => (isBase ? '' : signed(a - b))
      const syncs = withSyncs ? ` ${m.syncs ?? ''} |` : ''
      console.log(
        `| ${round + 1} | ${id}${isBase ? ' (baseline)' : ''} | ${ms(s.p50Ms)} | ${ms(s.p99Ms)} | ${ms(s.p999Ms)} | ${ms(s.maxMs)} | ${count(s.count)} | ${otherAnswers(m.run)} | ${ms(m.run.lateP99Ms ?? Number.NaN)} | ${percent(m.ours)} | ${percent(m.others)}${m.otherNames ? ` (${m.otherNames})` : ''} | ${percent(m.softirq)} |${syncs} ${added(s.p50Ms, base.p50Ms)} | ${added(s.p99Ms, base.p99Ms)} | ${added(s.p999Ms, base.p999Ms)} |`,
      )
    }
  })
  for (const id of servers) {
    const of = (pick: (m: Measured) => number) =>
      median(rounds.map((r) => (r.get(id) ? pick(r.get(id) as Measured) : Number.NaN)))
    const addedOf = (field: 'p50Ms' | 'p99Ms' | 'p999Ms') =>
      id === benchCase.baseline ? '' : signed(addedMedian(result, id, field))
    const syncsMedian = of((m) => m.syncs ?? Number.NaN)
    const syncs = withSyncs ? ` ${Number.isNaN(syncsMedian) ? '' : syncsMedian} |` : ''
    console.log(
      `| median | ${id}${id === benchCase.baseline ? ' (baseline)' : ''} | ${ms(of((m) => m.run.summary.p50Ms))} | ${ms(of((m) => m.run.summary.p99Ms))} | ${ms(of((m) => m.run.summary.p999Ms))} | ${ms(of((m) => m.run.summary.maxMs))} | | | | ${percent(of((m) => m.ours ?? Number.NaN))} | | |${syncs} ${addedOf('p50Ms')} | ${addedOf('p99Ms')} | ${addedOf('p999Ms')} |`,
    )
  }
}

/** Median over the rounds of (server − baseline of the same round) at one percentile. */
function addedMedian(
  result: CaseResult,
  id: ServerId,
  field: 'p50Ms' | 'p99Ms' | 'p999Ms',
): number {
  return median(
    result.rounds.map((r) => {
      const server = r.get(id)?.run.summary[field]
      const base = r.get(result.benchCase.baseline)?.run.summary[field]
      return server === undefined || base === undefined ? Number.NaN : server - base
    }),
  )
}

export function printSummary(results: readonly CaseResult[]): void {
  console.log('\n### Added latency, median of rounds (ms; per round in brackets)\n')
  console.log(
    '| case | rate req/s | server | baseline | added p50 | added p99 | added p99.9 | others on CPU 0 per round (server / baseline) |',
  )
  console.log('|---|---:|---|---|---:|---:|---:|---|')
  for (const result of results) {
    const { benchCase } = result
    for (const id of [benchCase.subject, ...benchCase.others]) {
      const perRound = (field: 'p50Ms' | 'p99Ms' | 'p999Ms') => {
        const each = result.rounds.map((r) => {
          const s = r.get(id)?.run.summary[field]
          const b = r.get(benchCase.baseline)?.run.summary[field]
          return s === undefined || b === undefined ? '-' : signed(s - b)
        })
        const mid = signed(addedMedian(result, id, field))
        return each.length > 1 ? `${mid} (${each.join(', ')})` : mid
      }
      const others = result.rounds
        .map((r) => `${percent(r.get(id)?.others)} / ${percent(r.get(benchCase.baseline)?.others)}`)
        .join(', ')
      console.log(
        `| ${benchCase.id} | ${count(result.rate)} | ${id} | ${benchCase.baseline} | ${perRound('p50Ms')} | ${perRound('p99Ms')} | ${perRound('p999Ms')} | ${others} |`,
      )
    }
  }
}
