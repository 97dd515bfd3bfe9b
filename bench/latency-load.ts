/**
 * One fixed-rate latency run, by one of two load generators on the load CPU:
 * - `paced` (bench/paced-load.ts): evenly spaced, latency from each request's due time, token
 *   rotation; µs resolution;
 * - `hey` (Debian package): `-c` workers each ticking at `-q` per second, latency from the
 *   actual send, 0.1 ms resolution (its CSV prints seconds to 4 decimals). Its workers tick in
 *   step, so it sends bursts of `-c` requests; `-c 1` is even but a closed loop (a slow answer
 *   delays or drops the ticks after it).
 * Both count only 2xx answers in the percentiles; everything else is reported beside them.
 */
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type LatencySummary, summarize } from './latency-stats.ts'
import type { PacedResult } from './paced-load.ts'
import { pinned } from './processes.ts'

export type Generator = 'paced' | 'hey'

export interface LatencyRequest {
  readonly url: string
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  /**
   * A token per request from a file (paced only), from line `start`: never repeated, unless
   * `wrap` lets the run start the file over.
   */
  readonly pool?: {
    readonly file: string
    readonly start: number
    readonly tenant?: string
    readonly wrap?: boolean
  }
}

export interface LatencyOptions {
  /** Requests per second, all connections together. */
  readonly rate: number
  readonly durationSec: number
  /** Sent at the same rate first and not measured. */
  readonly warmupSec: number
  /** paced: sockets; hey: workers (`-c`). */
  readonly connections: number
  readonly cpu: number
}

export interface LatencyRun {
  readonly generator: Generator
  /** Of the 2xx answers to requests due in the measured window. */
  readonly summary: LatencySummary
  /** Requests the schedule had in the measured window. */
  readonly due: number
  /** Answers that were not 2xx, by status. */
  readonly non2xx: Record<string, number>
  /**
   * paced: requests lost to a socket error or unanswered 5 s after the end; hey: requests due
   * but not answered (its errors, which its CSV leaves out, and ticks it skipped while waiting).
   */
  readonly failed: number
  /**
   * paced only: how late the generator itself took up its 99th-percentile request (its clock
   * and CPU; waits for a free socket, i.e. for the server, are not in it), ms.
   */
  readonly lateP99Ms?: number
}

export function runLatency(
  generator: Generator,
  request: LatencyRequest,
  options: LatencyOptions,
): Promise<LatencyRun> {
  if (request.pool && generator !== 'paced') throw new Error('only the paced generator rotates')
  return generator === 'paced' ? runPaced(request, options) : runHey(request, options)
}

async function runPaced(request: LatencyRequest, options: LatencyOptions): Promise<LatencyRun> {
  const dir = mkdtempSync(join(tmpdir(), 'tg-paced-'))
  const out = join(dir, 'latencies.f64')
  const argv = [
    join(import.meta.dirname, 'paced-load.ts'),
    '--url',
    request.url,
    '--path',
    request.path,
    '--rate',
    String(options.rate),
    '--duration',
    String(options.durationSec),
    '--warmup',
    String(options.warmupSec),
    '--connections',
    String(options.connections),
    '--out',
    out,
  ]
  for (const [name, value] of Object.entries(request.headers))
    argv.push('--header', `${name}: ${value}`)
  if (request.pool) {
    argv.push('--pool', request.pool.file, '--pool-start', String(request.pool.start))
    if (request.pool.tenant) argv.push('--tenant', request.pool.tenant)
    if (request.pool.wrap) argv.push('--wrap')
  }
  try {
    const stdout = await run(pinned(options.cpu, process.execPath, argv))
    const result = JSON.parse(stdout) as PacedResult
    const bytes = readFileSync(out)
    const latencies = new Float64Array(bytes.buffer, bytes.byteOffset, bytes.length / 8).slice()
    return {
      generator: 'paced',
      summary: summarize(latencies),
      due: result.due,
      non2xx: result.non2xx,
      failed: result.failed,
      lateP99Ms: result.lateP99Ms,
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

async function runHey(request: LatencyRequest, options: LatencyOptions): Promise<LatencyRun> {
  const total = options.warmupSec + options.durationSec
  const argv = [
    '-z',
    `${total}s`,
    '-c',
    String(options.connections),
    '-q',
    String(options.rate / options.connections),
    '-o',
    'csv',
    '-disable-compression',
  ]
  for (const [name, value] of Object.entries(request.headers)) argv.push('-H', `${name}: ${value}`)
  argv.push(`${request.url}${request.path}`)
  const csv = await run(pinned(options.cpu, 'hey', argv))
  const latencies: number[] = []
  const non2xx: Record<string, number> = {}
  let answered = 0
  // response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset
  for (const line of csv.split('\n').slice(1)) {
    const fields = line.split(',')
    if (fields.length < 8) continue
    const offset = Number(fields[7])
    if (offset < options.warmupSec || offset >= total) continue
    answered++
    const status = Number(fields[6])
    if (status >= 200 && status < 300) latencies.push(Number(fields[0]) * 1000)
    else non2xx[status] = (non2xx[status] ?? 0) + 1
  }
  const due = Math.round(options.rate * options.durationSec)
  return {
    generator: 'hey',
    summary: summarize(Float64Array.from(latencies)),
    due,
    non2xx,
    failed: Math.max(0, due - answered),
  }
}

function run([command, argv]: [string, string[]]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, argv, { encoding: 'utf8', maxBuffer: 1 << 30 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} ${argv.slice(0, 6).join(' ')}: ${stderr || error}`))
      else resolve(stdout)
    })
  })
}
