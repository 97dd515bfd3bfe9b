import type { UsagePoint, UsageSeries } from '../auth/usage.ts'
import { type Html, html } from './html.ts'

export const SERIES = ['allowed', 'unauthorized', 'forbidden', 'limited'] as const
type Series = (typeof SERIES)[number]

export const SERIES_LABELS: Readonly<Record<Series, string>> = {
  allowed: 'Allowed',
  unauthorized: '401 unauthenticated',
  forbidden: '403 forbidden',
  limited: '429 rate limited or quota spent',
}

const UNIT: Readonly<Record<UsageSeries['resolution'], string>> = {
  minute: 'requests per minute',
  hour: 'requests per hour',
  day: 'requests per day',
}

/** Time tick steps, shortest first: a chart gets the first that leaves at most 8 ticks. */
const TIME_STEPS_MS = [
  60_000,
  300_000,
  600_000,
  900_000,
  1_800_000,
  3_600_000,
  7_200_000,
  10_800_000,
  21_600_000,
  43_200_000,
  86_400_000,
  2 * 86_400_000,
  7 * 86_400_000,
  14 * 86_400_000,
  30 * 86_400_000,
  91 * 86_400_000,
  365 * 86_400_000,
]

const WIDTH = 760
const HEIGHT = 280
const LEFT = 64
const RIGHT = 16
const TOP = 16
const BOTTOM = 48

/**
 * A usage series as an inline SVG line chart, rendered on the server (no chart library, no
 * script: the console's CSP allows none inline). The axes are real: the x axis is time (UTC)
 * with ticks at round times, the y axis counts with round steps and names its unit
 * (requests per minute, hour or day). Each outcome is a line with a legend entry; a table of
 * the totals follows for screen readers.
 */
export function usageChart(series: UsageSeries, title: string): Html {
  const points = series.points
  const span = Math.max(1, series.until - series.since)
  const bucket = span / Math.max(1, points.length)
  const plotWidth = WIDTH - LEFT - RIGHT
  const plotHeight = HEIGHT - TOP - BOTTOM
  // Each point at the middle of its bucket.
  const x = (t: number) => LEFT + ((t - series.since) / span) * plotWidth
  const peak = Math.max(0, ...points.flatMap((p) => SERIES.map((s) => p[s])))
  const yStep = niceStep(peak, 5)
  const yMax = Math.max(yStep, Math.ceil(peak / yStep) * yStep)
  const y = (v: number) => TOP + plotHeight - (v / yMax) * plotHeight
  const yTicks: number[] = []
  for (let v = 0; v <= yMax; v += yStep) yTicks.push(v)
  const tStep = TIME_STEPS_MS.find((step) => span / step <= 8) ?? TIME_STEPS_MS.at(-1) ?? span
  const tTicks: number[] = []
  for (let t = Math.ceil(series.since / tStep) * tStep; t <= series.until; t += tStep)
    tTicks.push(t)
  const lines = SERIES.map((s) => {
    const coords = points.map(
      (p: UsagePoint) => `${x(p.start + bucket / 2).toFixed(1)},${y(p[s]).toFixed(1)}`,
    )
    return html`<polyline class="series-${s}" fill="none" points="${coords.join(' ')}"/>`
  })
  const id = `chart-${series.scope}-${series.resolution}`
  return html`<figure class="chart">
  <svg viewBox="0 0 ${WIDTH} ${HEIGHT}" role="img" aria-labelledby="${id}-title" data-resolution="${series.resolution}">
    <title id="${id}-title">${title}: ${UNIT[series.resolution]} by outcome, ${timeLabel(series.since, span)} to ${timeLabel(series.until, span)} UTC (peak ${peak})</title>
    ${yTicks.map(
      (v) =>
        html`<line class="grid" x1="${LEFT}" y1="${y(v).toFixed(1)}" x2="${WIDTH - RIGHT}" y2="${y(v).toFixed(1)}"/><text class="tick y-tick" x="${LEFT - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${formatCount(v)}</text>`,
    )}
    ${tTicks.map(
      (t) =>
        html`<line class="axis" x1="${x(t).toFixed(1)}" y1="${TOP + plotHeight}" x2="${x(t).toFixed(1)}" y2="${TOP + plotHeight + 5}"/><text class="tick x-tick" x="${x(t).toFixed(1)}" y="${TOP + plotHeight + 18}" text-anchor="middle" data-time="${new Date(t).toISOString()}">${timeLabel(t, span)}</text>`,
    )}
    <line class="axis" x1="${LEFT}" y1="${TOP + plotHeight}" x2="${WIDTH - RIGHT}" y2="${TOP + plotHeight}"/>
    <line class="axis" x1="${LEFT}" y1="${TOP}" x2="${LEFT}" y2="${TOP + plotHeight}"/>
    <text class="unit" x="${LEFT}" y="${HEIGHT - 8}">time (UTC)</text>
    <text class="unit" x="12" y="${TOP + plotHeight / 2}" transform="rotate(-90 12 ${TOP + plotHeight / 2})" text-anchor="middle">${UNIT[series.resolution]}</text>
    ${lines}
  </svg>
  <ul class="legend">${SERIES.map((s) => html`<li><span class="swatch series-${s}"></span>${SERIES_LABELS[s]}</li>`)}</ul>
  <div class="table-wrap"><table><caption>Totals, ${timeLabel(series.since, span)} to ${timeLabel(series.until, span)} UTC</caption><thead><tr><th scope="col">Outcome</th><th scope="col">Requests</th></tr></thead>
  <tbody>${SERIES.map((s) => html`<tr><td>${SERIES_LABELS[s]}</td><td>${series.totals[s]}</td></tr>`)}</tbody></table></div>
</figure>`
}

/** A round step (1, 2 or 5 × 10^n) giving about `ticks` steps up to `max`. */
export function niceStep(max: number, ticks: number): number {
  if (max <= ticks) return 1
  const raw = max / ticks
  const power = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 5, 10].find((m) => m * power >= raw) ?? 10
  return step * power
}

/** A tick's time: `HH:MM` within two days, else `Mon DD` (UTC). */
function timeLabel(t: number, span: number): string {
  const iso = new Date(t).toISOString()
  if (span <= 2 * 86_400_000) return iso.slice(11, 16)
  const date = new Date(t)
  const month = date.toLocaleString('en', { month: 'short', timeZone: 'UTC' })
  return `${month} ${date.getUTCDate()}`
}

function formatCount(n: number): string {
  if (n >= 1_000_000) return `${n / 1_000_000}M`
  if (n >= 10_000) return `${n / 1000}k`
  return String(n)
}

/**
 * A subject's usage on its console page: the resolution to show (links that keep the page),
 * the chart, and the CSV download of the same series.
 */
export function usagePanel(series: UsageSeries, page: string, title: string, csv: string): Html {
  const choices = [
    ['minute', 'Last hour, per minute'],
    ['hour', 'Last 48 hours, per hour'],
    ['day', 'Last 30 days, per day'],
  ] as const
  const csvLink = `${csv}${csv.includes('?') ? '&' : '?'}resolution=${series.resolution}`
  return html`<nav class="toolbar" aria-label="Usage period">${choices.map(
    ([resolution, label]) =>
      html`<a href="${page}?resolution=${resolution}" ${series.resolution === resolution ? html`aria-current="true"` : ''}>${label}</a>`,
  )}<a href="${csvLink}" download>Export CSV</a></nav>
${usageChart(series, title)}`
}
