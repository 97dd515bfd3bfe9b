import { type Html, html } from './html.ts'
import { TRAFFIC_SERIES, type TrafficBucket, type TrafficSeries } from './traffic.ts'

const LABELS: Readonly<Record<TrafficSeries, string>> = {
  ok: 'Allowed (2xx-4xx other)',
  unauthorized: '401 unauthenticated',
  forbidden: '403 forbidden',
  limited: '429 rate limited',
  error: '5xx errors',
}

/**
 * Requests and auth outcomes over time as an inline SVG line chart, rendered on the server
 * (no chart library, no script). Each series has a class for its colour and a legend entry;
 * the totals follow as a table for screen readers.
 */
export function trafficChart(buckets: readonly TrafficBucket[], groupBy = 6): Html {
  const groups: { start: number; counts: Record<TrafficSeries, number> }[] = []
  for (let i = 0; i < buckets.length; i += groupBy) {
    const slice = buckets.slice(i, i + groupBy)
    const counts = { ok: 0, unauthorized: 0, forbidden: 0, limited: 0, error: 0 }
    for (const b of slice) for (const s of TRAFFIC_SERIES) counts[s] += b.counts[s]
    groups.push({ start: (slice[0] as TrafficBucket).start, counts })
  }
  const width = 720
  const height = 240
  const pad = 36
  const max = Math.max(1, ...groups.flatMap((g) => TRAFFIC_SERIES.map((s) => g.counts[s])))
  const x = (i: number) => pad + (i * (width - 2 * pad)) / Math.max(1, groups.length - 1)
  const y = (v: number) => height - pad - (v * (height - 2 * pad)) / max
  const lines = TRAFFIC_SERIES.map((s) => {
    const points = groups.map((g, i) => `${x(i).toFixed(1)},${y(g.counts[s]).toFixed(1)}`)
    return html`<polyline class="series-${s}" fill="none" points="${points.join(' ')}"/>`
  })
  const totals = TRAFFIC_SERIES.map(
    (s) => [s, groups.reduce((n, g) => n + g.counts[s], 0)] as const,
  )
  const first = groups[0]?.start ?? 0
  const last = groups[groups.length - 1]?.start ?? 0
  return html`<figure class="chart">
  <svg viewBox="0 0 ${width} ${height}" role="img" aria-labelledby="chart-title">
    <title id="chart-title">API requests per minute by outcome, last hour (peak ${max})</title>
    <line class="axis" x1="${pad}" y1="${height - pad}" x2="${width - pad}" y2="${height - pad}"/>
    <line class="axis" x1="${pad}" y1="${pad}" x2="${pad}" y2="${height - pad}"/>
    <text x="4" y="${pad}" class="tick">${max}</text>
    <text x="4" y="${height - pad}" class="tick">0</text>
    ${lines}
  </svg>
  <figcaption>Requests per minute from ${new Date(first).toISOString()} to ${new Date(last).toISOString()} (UTC).</figcaption>
  <ul class="legend">${TRAFFIC_SERIES.map((s) => html`<li><span class="swatch series-${s}"></span>${LABELS[s]}</li>`)}</ul>
  <table><caption>Totals, last hour</caption><thead><tr><th scope="col">Outcome</th><th scope="col">Requests</th></tr></thead>
  <tbody>${totals.map(([s, n]) => html`<tr><td>${LABELS[s]}</td><td>${n}</td></tr>`)}</tbody></table>
</figure>`
}
