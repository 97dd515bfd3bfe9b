/**
 * An evenly paced HTTP/1.1 load generator for tail latency, one process (pinned to the load
 * CPU by the caller). Request i is due at start + i / rate; its latency runs from that due
 * time, not from when it could be sent, so a stalled server is charged for every request
 * that waited behind it (no coordinated omission). Keep-alive sockets, no pipelining: a due
 * request goes out on an idle socket, or waits in order for the next one to free up.
 *
 * Hand-written because no packaged generator both paces evenly and measures from the
 * schedule: autocannon's `-R` sends in bursts, hey's workers tick in step (bursts of `-c`)
 * and measure from the actual send, wrk2 is not packaged. It also rotates tokens, so every
 * request can carry a JWT the server has never seen.
 *
 * A worker thread keeps the time: it sleeps in `Atomics.wait` (sub-millisecond timeouts,
 * unlike Node's timers) until each due time and wakes the sending thread, which stays free
 * to read answers the moment they arrive.
 *
 * Usage: node bench/paced-load.ts --url http://127.0.0.1:8080 --path /api/v1/me --rate 3000
 *   --duration 5 [--warmup 1] [--connections 32] [--header 'name: value']...
 *   [--pool FILE --pool-start N [--tenant T] [--wrap]] [--out FILE] [--trace FILE] [--help]
 * (bench/cli.ts: an unknown flag or a bad number stops it with the usage, exit 2.)
 * `--pool`: one token per line; request i sends `Authorization: Bearer <line start+i>` (and
 * `X-Tenant-Id: T`); the run fails rather than reuse a token, unless `--wrap` lets it start
 * the file over. `--out`: the measured 2xx latencies (ms) as a raw Float64Array. Prints one
 * JSON line (`PacedResult`). `--trace`: every request's due, taken-up, sent and answered times
 * and status (see `traceOf`), for bench/latency-stalls.ts.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { Worker } from 'node:worker_threads'
import { exitWithUsage, readCli } from './cli.ts'
import { percentile } from './latency-stats.ts'

export interface PacedResult {
  /** Requests due in the measured window (after the warm-up). */
  readonly due: number
  /** 2xx answers in the window. */
  readonly ok: number
  /** Answers in the window by non-2xx status. */
  readonly non2xx: Record<string, number>
  /** Requests in the window lost to a socket error or never answered within the grace time. */
  readonly failed: number
  /**
   * How late the generator took up each request after its due time (negative: early), ms:
   * its clock and its own CPU, not the server (a wait for a free socket is not counted here).
   */
  readonly lateP1Ms: number
  readonly lateP50Ms: number
  readonly lateP99Ms: number
  /** Tokens of the pool used, from `--pool-start` (warm-up included). */
  readonly poolUsed: number
}

/** Answers still out this long after the last due time count as failed. */
const GRACE_MS = 5_000

const now = () => Number(process.hrtime.bigint()) / 1e6

// The ticker (plain JavaScript, run by `eval`): wakes the sending thread at every due time.
// A futex wait overshoots by ~0.1 ms (the kernel's timer slack), so it wakes `early` ms before
// the due time, a running mean of the overshoot (a descheduled moment of several ms counts as
// 0.2): ticks land around the due time, a few tens of µs either side. It never spins: it
// shares the load CPU with the sending thread.
const TICKER = `
const { parentPort, workerData } = require('node:worker_threads')
const { start, intervalMs, total } = workerData
const cell = new Int32Array(new SharedArrayBuffer(4))
const now = () => Number(process.hrtime.bigint()) / 1e6
let early = 0.08
for (let i = 0; i < total; i++) {
  const wake = start + i * intervalMs - early
  const wait = wake - now()
  if (wait > 0) {
    Atomics.wait(cell, 0, 0, wait)
    early = Math.max(0, early + (Math.min(now() - wake, 0.2) - early) / 16)
  }
  parentPort.postMessage(i)
}
`

/** One keep-alive socket and the parse state of the answer it waits for. */
interface Conn {
  socket: Socket
  /** Index of the request in flight, -1 when idle. */
  request: number
  buffer: Buffer | undefined
  /** Body bytes still expected; -1 while reading the head; -2 while reading chunk sizes. */
  need: number
  status: number
  closeAfter: boolean
}

const CLI = {
  script: 'bench/paced-load.ts',
  options: {
    url: { type: 'string', value: 'URL' },
    path: { type: 'string', default: '/' },
    rate: { type: 'number' },
    duration: { type: 'number', value: 'SEC', default: 5 },
    warmup: { type: 'number', zero: true, value: 'SEC', default: 1 },
    connections: { type: 'number', integer: true, default: 32 },
    header: { type: 'strings', value: "'NAME: VALUE'" },
    pool: { type: 'string', value: 'FILE' },
    'pool-start': { type: 'number', integer: true, zero: true, default: 0 },
    tenant: { type: 'string' },
    wrap: { type: 'boolean' },
    out: { type: 'string', value: 'FILE' },
    trace: { type: 'string', value: 'FILE' },
  },
} as const

function main(): void {
  const { values } = readCli(CLI)
  if (values.url === undefined || values.rate === undefined) {
    exitWithUsage(CLI, '--url and --rate are required')
  }
  const target = new URL(values.url)
  const rate = values.rate
  const intervalMs = 1000 / rate
  const warmupCount = Math.round(values.warmup * rate)
  const total = warmupCount + Math.round(values.duration * rate)
  const requestOf = requestBuilder(values, target, total)

  const dueAt = (i: number) => start + i * intervalMs
  const latency = new Float64Array(total).fill(Number.NaN)
  const sentAt = new Float64Array(total).fill(Number.NaN)
  const takenAt = new Float64Array(total).fill(Number.NaN)
  const doneAt = new Float64Array(total).fill(Number.NaN)
  const status = new Uint16Array(total)
  const waiting: number[] = []
  let waitingHead = 0
  let next = 0
  let settled = 0
  const idle: Conn[] = []

  const send = (conn: Conn, i: number) => {
    conn.request = i
    sentAt[i] = now()
    conn.socket.write(requestOf(i))
  }
  const dispatch = (i: number) => {
    takenAt[i] = now()
    const conn = idle.pop()
    if (conn) send(conn, i)
    else waiting.push(i)
  }
  const release = (conn: Conn) => {
    conn.request = -1
    if (conn.closeAfter) return void replace(conn)
    if (waitingHead < waiting.length) send(conn, waiting[waitingHead++] as number)
    else idle.push(conn)
  }
  // From the due time, or from the send when the ticker fired a few µs early: a late request
  // is charged its wait (for the clock or a free socket), an early one is not flattered.
  const finish = (i: number, code: number) => {
    doneAt[i] = now()
    latency[i] = (doneAt[i] as number) - Math.min(dueAt(i), sentAt[i] as number)
    status[i] = code
    settled++
  }
  // A request whose socket went away keeps status 0: counted as failed.
  const fail = (conn: Conn) => {
    if (conn.request >= 0) settled++
    conn.request = -1
  }
  const open = (): Conn => {
    const socket = connect({ host: target.hostname, port: Number(target.port), noDelay: true })
    const conn: Conn = {
      socket,
      request: -1,
      buffer: undefined,
      need: -1,
      status: 0,
      closeAfter: false,
    }
    socket.on('data', (chunk: Buffer) => {
      if (conn.request < 0) return
      if (parse(conn, chunk)) {
        finish(conn.request, conn.status)
        release(conn)
      }
    })
    socket.on('error', () => {})
    socket.on('close', () => {
      if (stopping) return
      fail(conn)
      const at = idle.indexOf(conn)
      if (at !== -1) idle.splice(at, 1)
      if (!stopping) release(open())
    })
    return conn
  }
  const replace = (conn: Conn) => {
    conn.socket.removeAllListeners('close')
    conn.socket.destroy()
    release(open())
  }

  let stopping = false
  for (let c = 0; c < values.connections; c++) idle.push(open())
  const start = now() + 200
  const ticker = new Worker(TICKER, { eval: true, workerData: { start, intervalMs, total } })
  ticker.on('message', (tick: number) => {
    const t = now()
    while (next < total && (next <= tick || dueAt(next) <= t)) dispatch(next++)
  })
  const done = () => {
    stopping = true
    clearInterval(poll)
    for (const conn of idle) conn.socket.destroy()
    const measured: number[] = []
    const non2xx: Record<string, number> = {}
    let unanswered = 0
    for (let i = warmupCount; i < total; i++) {
      const code = status[i] as number
      if (code >= 200 && code < 300) measured.push(latency[i] as number)
      else if (code !== 0) non2xx[code] = (non2xx[code] ?? 0) + 1
      else unanswered++
    }
    if (values.out) writeFileSync(values.out, new Float64Array(measured))
    if (values.trace)
      writeFileSync(values.trace, traceOf(total, dueAt, takenAt, sentAt, doneAt, status))
    const lags = Float64Array.from(
      takenAt.subarray(warmupCount).map((at, k) => at - dueAt(warmupCount + k)),
    ).filter((v) => !Number.isNaN(v))
    lags.sort()
    const result: PacedResult = {
      due: total - warmupCount,
      ok: measured.length,
      non2xx,
      failed: unanswered,
      lateP1Ms: percentile(lags, 1),
      lateP50Ms: percentile(lags, 50),
      lateP99Ms: percentile(lags, 99),
      poolUsed: values.pool && !values.wrap ? total : 0,
    }
    process.stdout.write(`${JSON.stringify(result)}\n`)
    process.exit(0)
  }
  const poll = setInterval(() => {
    if (settled === total) done()
    else if (next === total && now() > dueAt(total - 1) + GRACE_MS) done()
  }, 20)
}

/**
 * `--trace`: every request as 5 float64s, [due, taken up, sent, answered, status] (times in
 * CLOCK_MONOTONIC ms, as bench/latency-probe.ts logs them; NaN when it never happened).
 */
function traceOf(
  total: number,
  dueAt: (i: number) => number,
  ...columns: [Float64Array, Float64Array, Float64Array, Uint16Array]
): Float64Array {
  const trace = new Float64Array(total * 5)
  for (let i = 0; i < total; i++) {
    trace[i * 5] = dueAt(i)
    for (let c = 0; c < 4; c++) trace[i * 5 + 1 + c] = columns[c]?.[i] as number
  }
  return trace
}

/** The request bytes for request i: fixed, or with the pool's token i. */
function requestBuilder(
  values: {
    path: string
    header: string[]
    pool?: string
    'pool-start': number
    tenant?: string
    wrap: boolean
  },
  target: URL,
  total: number,
): (i: number) => Buffer {
  const head = `GET ${values.path} HTTP/1.1\r\nHost: ${target.host}\r\n`
  const extra = values.header.map((line) => `${line}\r\n`).join('')
  if (!values.pool) {
    const fixed = Buffer.from(`${head}${extra}\r\n`, 'latin1')
    return () => fixed
  }
  const tenant = values.tenant ? `X-Tenant-Id: ${values.tenant}\r\n` : ''
  const build = (token: string) =>
    Buffer.from(`${head}Authorization: Bearer ${token}\r\n${tenant}${extra}\r\n`, 'latin1')
  const from = values['pool-start']
  const tokens = readFileSync(values.pool, 'utf8').split('\n').filter(Boolean)
  if (values.wrap) {
    const requests = tokens.map(build)
    return (i) => requests[(from + i) % requests.length] as Buffer
  }
  if (tokens.length < from + total) {
    throw new Error(
      `token pool ${values.pool} has ${tokens.length - from} unused tokens from ${from}; the run needs ${total}`,
    )
  }
  const requests = tokens.slice(from, from + total).map(build)
  return (i) => requests[i] as Buffer
}

/**
 * Feeds a chunk of the answer to `conn`'s parser; true once the answer is complete (status in
 * `conn.status`). Content-Length and chunked bodies; no trailers.
 */
function parse(conn: Conn, chunk: Buffer): boolean {
  let buf = conn.buffer ? Buffer.concat([conn.buffer, chunk]) : chunk
  for (;;) {
    if (conn.need === -1) {
      const end = buf.indexOf('\r\n\r\n')
      if (end === -1) break
      const head = buf.toString('latin1', 0, end)
      conn.status = Number(head.slice(9, 12))
      conn.closeAfter = /\r\nconnection:\s*close/i.test(head)
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(head)
      buf = buf.subarray(end + 4)
      conn.need = /\r\ntransfer-encoding:[^\r]*chunked/i.test(head) ? -2 : Number(length?.[1] ?? 0)
      continue
    }
    if (conn.need === -2) {
      const end = buf.indexOf('\r\n')
      if (end === -1) break
      const size = Number.parseInt(buf.toString('latin1', 0, end), 16)
      if (size === 0) {
        if (buf.length < end + 4) break
        return complete(conn, buf.subarray(end + 4))
      }
      if (buf.length < end + 2 + size + 2) break
      buf = buf.subarray(end + 2 + size + 2)
      continue
    }
    if (buf.length < conn.need) break
    return complete(conn, buf.subarray(conn.need))
  }
  conn.buffer = buf.length > 0 ? buf : undefined
  return false
}

function complete(conn: Conn, rest: Buffer): boolean {
  if (rest.length > 0) throw new Error('bytes after the answer: the server pipelined or lied')
  conn.buffer = undefined
  conn.need = -1
  return true
}

if (import.meta.main) main()
