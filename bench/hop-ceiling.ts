/**
 * The ceiling of the decision hop (issue #36): what nginx `auth_request` costs with a decision
 * listener that does nothing, written two ways (bench/servers/decision-floor.ts: `http`, node:http
 * answering tokengate's allow bytes, and `net`, a bare socket writing them), so the listener's
 * own HTTP layer is measured apart from tokengate's work. `npm run bench`'s hops case runs the
 * same responders as rows beside tokengate's (bench/hop-rows.ts); this script adds their CPU.
 * Both sit behind the shipped example (examples/forward-auth/nginx.conf, keepalive) in front
 * of the bench upstream, over loopback TCP or, as `http-unix` and `net-unix`, over a Unix
 * socket (`server unix:...` in the decision upstream), everything on CPU 0, the load on CPU 1,
 * as `hop-cpu.ts` runs them.
 * Per round and responder: CPU µs per request of the responder (user and system apart),
 * nginx and the upstream at an evenly paced rate, then the same under wrk's saturation and
 * wrk's req/s; nginx alone (its plain listener) once at the end for the ratio.
 *
 * Usage: node bench/hop-ceiling.ts [--rate 2000] [--duration 4] [--rounds 4]
 *   [--kinds http,net,http-unix,net-unix]
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { readCli } from './cli.ts'
import { loadFixtures } from './fixtures.ts'
import { runLatency } from './latency-load.ts'
import { LOAD_CPU } from './latency-servers.ts'
import { median } from './latency-stats.ts'
import { cpuMicros } from './load.ts'
import { freePort, type Started, startNode } from './processes.ts'
import { type RunningNginx, startNginx } from './servers/nginx.ts'

const { values } = readCli({
  script: 'bench/hop-ceiling.ts',
  options: {
    rate: { type: 'number', default: 2000 },
    duration: { type: 'number', value: 'SEC', default: 4 },
    rounds: { type: 'number', integer: true, default: 4 },
    kinds: { type: 'string', value: 'LIST', default: 'http,net' },
  },
})

await measure()

async function measure(): Promise<void> {
  const RATE = values.rate
  const DURATION = values.duration
  const fixtures = loadFixtures(join(tmpdir(), 'tokengate-latency-fixtures'))
  const upstreamPort = await freePort()
  const upstream = await startNode(0, [
    'bench/servers/peer.ts',
    'upstream',
    'RS256',
    fixtures.dir,
    String(upstreamPort),
  ])
  const kinds = values.kinds.split(',')
  const socketDir = mkdtempSync(join(tmpdir(), 'tokengate-hop-ceiling-'))
  const running: { kind: string; responder: Started; nginx: RunningNginx }[] = []
  const rows = new Map<string, Record<string, number[]>>()
  const push = (kind: string, column: string, value: number) => {
    const row = rows.get(kind) ?? {}
    row[column] = [...(row[column] ?? []), value]
    rows.set(kind, row)
  }
  try {
    for (const kind of kinds) {
      const [base = '', transport] = kind.split('-')
      const socket = transport === 'unix' ? join(socketDir, `${base}.sock`) : undefined
      const responder = await startNode(0, [
        'bench/servers/decision-floor.ts',
        base,
        socket ? `unix:${socket}` : '0',
      ])
      const port = socket ? 9 : Number(/READY (\d+)/.exec(responder.output)?.[1])
      const nginx = await startNginx(upstreamPort, port, { cpu: 0, decisionSocket: socket })
      running.push({ kind, responder, nginx })
    }
    for (let round = 0; round < values.rounds; round++) {
      for (const { kind, responder, nginx } of round % 2 ? [...running].reverse() : running) {
        const pids = [responder.child.pid, nginx.child.pid, upstream.child.pid]
        const cpu = () => pids.map((pid) => cpuMicros(pid) ?? 0)
        const split = userSystem(responder.child.pid)
        const before = cpu()
        const url = `${nginx.guarded}/api/v1/projects/p1`
        const run = await runLatency(
          'paced',
          { url: nginx.guarded, path: '/api/v1/projects/p1', headers: {} },
          { rate: RATE, durationSec: DURATION, warmupSec: 0.5, connections: 32, cpu: LOAD_CPU },
        )
        const n = run.summary.count
        const after = cpu()
        const splitAfter = userSystem(responder.child.pid)
        for (const [i, column] of ['responder', 'nginx', 'upstream'].entries()) {
          push(kind, column, ((after[i] ?? 0) - (before[i] ?? 0)) / n)
        }
        push(kind, 'user', (splitAfter[0] - split[0]) / n)
        push(kind, 'system', (splitAfter[1] - split[1]) / n)
        const wrk = wrkRun(url, DURATION, cpu)
        push(kind, 'saturated responder', wrk.perRequest[0] ?? 0)
        push(kind, 'saturated nginx', wrk.perRequest[1] ?? 0)
        push(kind, 'saturated upstream', wrk.perRequest[2] ?? 0)
        push(kind, 'req/s', wrk.rps)
        process.stderr.write(`round ${round + 1} ${kind}: ${n} paced 2xx, wrk ${wrk.rps}/s\n`)
      }
    }
    const first = running[0]
    const plain = first
      ? wrkRun(`${first.nginx.plain}/api/v1/projects/p1`, DURATION, () => [
          cpuMicros(first.nginx.child.pid) ?? 0,
          cpuMicros(upstream.child.pid) ?? 0,
        ])
      : undefined
    console.log(
      `\n| ${RATE} req/s paced, ${values.rounds} rounds; µs/req, medians (per round) | responder | user | system | nginx | upstream | saturated: responder | nginx | upstream | req/s |`,
    )
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for (const [kind, row] of rows) {
      const f = (column: string, digits = 1) => {
        const xs = row[column] ?? []
        return `${median(xs).toFixed(digits)} (${xs.map((x) => x.toFixed(0)).join(', ')})`
      }
      console.log(
        `| ${kind} | ${f('responder')} | ${f('user')} | ${f('system')} | ${f('nginx')} | ${f('upstream')} | ${f('saturated responder')} | ${f('saturated nginx')} | ${f('saturated upstream')} | ${f('req/s', 0)} |`,
      )
    }
    if (plain) {
      const [nginx = 0, up = 0] = plain.perRequest
      console.log(
        `\nnginx alone (no auth_request, wrk once): ${plain.rps} req/s; CPU µs/req nginx ${nginx.toFixed(1)}, upstream ${up.toFixed(1)}`,
      )
    }
  } finally {
    for (const { responder, nginx } of running) {
      responder.child.kill()
      nginx.child.kill()
    }
    upstream.child.kill()
    await new Promise((resolve) => setTimeout(resolve, 300))
    for (const { nginx } of running) nginx.cleanup()
    rmSync(socketDir, { recursive: true, force: true })
  }
}

/** wrk for `seconds` (32 connections, CPU 1): req/s and, with `cpu`, CPU µs per request. */
function wrkRun(
  url: string,
  seconds: number,
  cpu?: () => number[],
): { rps: number; perRequest: number[] } {
  const before = cpu?.() ?? []
  const out = execFileSync(
    'taskset',
    ['-c', String(LOAD_CPU), 'wrk', '-t1', '-c32', `-d${seconds}s`, url],
    { encoding: 'utf8' },
  )
  const after = cpu?.() ?? []
  const total = Number(/(\d+) requests in/.exec(out)?.[1])
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]),
    perRequest: after.map((a, i) => (a - (before[i] ?? 0)) / total),
  }
}

/** A process's own user and system CPU in µs (not its children's). */
function userSystem(pid: number | undefined): [number, number] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  const tick = 1e6 / 100
  return [Number(fields[11]) * tick, Number(fields[12]) * tick]
}
