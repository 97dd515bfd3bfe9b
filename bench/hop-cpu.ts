/**
 * CPU per request of each process on the decision hop (issue #36): nginx + tokengate's
 * decision listener with the shipped example (keepalive), the same without keepalive, and
 * with the decision cache, at one evenly paced rate, alternating rounds. CPU time, unlike
 * latency, stays readable on a shared machine: it is what each process spent, not how long
 * it waited for a core.
 *
 * Everything runs as in `latency.bench.ts --hops`: nginx, tokengate and the upstream on CPU 0,
 * the load on CPU 1; the sum of the three columns is what one request costs that core.
 *
 * Usage: node bench/hop-cpu.ts [--rate 2000] [--duration 4] [--rounds 3]
 */

import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { loadFixtures } from './fixtures.ts'
import { bearer } from './latency-cases.ts'
import { runLatency } from './latency-load.ts'
import { LatencyServers, LOAD_CPU, type ServerId } from './latency-servers.ts'
import { median } from './latency-stats.ts'
import { cpuMicros } from './load.ts'

const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '2000' },
    duration: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '3' },
  },
})
const RATE = Number(values.rate)
const DURATION = Number(values.duration)
const ROUNDS = Number(values.rounds)
const ROWS: ServerId[] = [
  'nginx',
  'nginx + decision',
  'nginx + decision (no keepalive)',
  'nginx + decision (cached)',
]

const fixtures = loadFixtures(join(tmpdir(), 'tokengate-latency-fixtures'))
const servers = new LatencyServers(fixtures)
const cpu = new Map<
  ServerId,
  { nginx: number[]; tokengate: number[]; upstream: number[]; p50: number[] }
>()
try {
  const tokengate = await servers.get('gateway')
  const upstream = await servers.get('upstream')
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 ? [...ROWS].reverse() : ROWS
    for (const id of order) {
      const server = await servers.get(id)
      const before = {
        nginx: cpuMicros(server.child.pid) ?? 0,
        tg: cpuMicros(tokengate.child.pid) ?? 0,
        up: cpuMicros(upstream.child.pid) ?? 0,
      }
      const run = await runLatency(
        'paced',
        { url: server.url, path: '/api/v1/projects/p1', headers: bearer(fixtures.patSingle) },
        { rate: RATE, durationSec: DURATION, warmupSec: 0, connections: 32, cpu: LOAD_CPU },
      )
      const n = run.summary.count
      const row = cpu.get(id) ?? { nginx: [], tokengate: [], upstream: [], p50: [] }
      row.nginx.push(((cpuMicros(server.child.pid) ?? 0) - before.nginx) / n)
      row.tokengate.push(((cpuMicros(tokengate.child.pid) ?? 0) - before.tg) / n)
      row.upstream.push(((cpuMicros(upstream.child.pid) ?? 0) - before.up) / n)
      row.p50.push(run.summary.p50Ms)
      cpu.set(id, row)
      process.stderr.write(`round ${round + 1} ${id}: ${n} 2xx\n`)
    }
  }
  console.log(
    `\n| ${RATE} req/s, ${ROUNDS} × ${DURATION} s | nginx CPU µs/req | tokengate CPU µs/req | upstream CPU µs/req | all three | p50 ms |`,
  )
  console.log('|---|---:|---:|---:|---:|---:|')
  for (const id of ROWS) {
    const row = cpu.get(id)
    if (!row) continue
    const f = (xs: number[]) =>
      `${median(xs).toFixed(1)} (${xs.map((x) => x.toFixed(0)).join(', ')})`
    const all = row.nginx.map((x, i) => x + (row.tokengate[i] ?? 0) + (row.upstream[i] ?? 0))
    console.log(
      `| ${id} | ${f(row.nginx)} | ${f(row.tokengate)} | ${f(row.upstream)} | ${median(all).toFixed(0)} | ${median(row.p50).toFixed(3)} |`,
    )
  }
} finally {
  await servers.stopAll()
}
