/**
 * The paced generator (bench/paced-load.ts) is what the tail-latency bench's numbers rest on:
 * it must charge a stalled server for every request that waited behind the stall (no
 * coordinated omission), read every answer framing a server may use, count only 2xx answers
 * as served, and never send a "fresh" token twice. Bounds only, no timing targets.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import { percentile, summarize } from '../../bench/latency-stats.ts'
import type { PacedResult } from '../../bench/paced-load.ts'

const dir = mkdtempSync(join(tmpdir(), 'tg-paced-test-'))
after(() => rmSync(dir, { recursive: true, force: true }))
const generator = new URL('../../bench/paced-load.ts', import.meta.url).pathname

function paced(args: string[]): Promise<{ result: PacedResult; latencies: Float64Array }> {
  const out = join(dir, `latencies-${Math.random()}.f64`)
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [generator, ...args, '--out', out], (error, stdout, stderr) => {
      if (error) return reject(new Error(stderr || String(error)))
      const bytes = readFileSync(out)
      resolve({
        result: JSON.parse(stdout) as PacedResult,
        latencies: new Float64Array(bytes.buffer, bytes.byteOffset, bytes.length / 8).slice(),
      })
    })
  })
}

/** Arguments for `rate` requests a second for `durationSec`, no warm-up (a later one wins). */
const schedule = (url: string, rate: number, durationSec: number) => [
  '--url',
  url,
  '--rate',
  String(rate),
  '--duration',
  String(durationSec),
  '--warmup',
  '0',
]

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  after(() => server.close())
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

test('a stall is charged to every request due during it, not only to the one in flight', async () => {
  let seen = 0
  const url = await listen(
    createServer((_req, res) => {
      // The 60th request (0.3 s in at 200/s) blocks the server for 300 ms.
      if (++seen === 60) {
        const until = performance.now() + 300
        while (performance.now() < until);
      }
      res.end('ok')
    }),
  )
  const { result, latencies } = await paced([...schedule(url, 200, 1), '--connections', '4'])
  assert.equal(result.due, 200)
  assert.equal(result.ok, 200)
  // Requests due in the stall's first 200 ms waited at least 100 ms each: ~40 of them. A
  // generator timing from the send on 4 busy sockets would report at most a handful.
  const slow = latencies.filter((ms) => ms >= 100).length
  assert.ok(slow >= 30, `only ${slow} latencies ≥ 100 ms`)
})

test('chunked and closing answers are read; non-2xx answers are counted apart', async () => {
  let seen = 0
  const url = await listen(
    createServer((_req, res) => {
      seen++
      if (seen % 10 === 0) return void res.writeHead(429).end('slow down')
      if (seen % 3 === 0) res.setHeader('connection', 'close')
      res.write('chunk one, ')
      res.end('chunk two')
    }),
  )
  const { result, latencies } = await paced(schedule(url, 300, 0.5))
  assert.equal(result.due, 150)
  assert.equal(result.failed, 0)
  assert.equal(result.non2xx['429'], 15)
  assert.equal(result.ok, 135)
  assert.equal(latencies.length, 135)
})

test('every request of a pool run carries the next unused token; a short pool is refused', async () => {
  const tokens = Array.from({ length: 50 }, (_, i) => `token-${i}`)
  const pool = join(dir, 'pool.txt')
  writeFileSync(pool, `${tokens.join('\n')}\n`)
  const received: string[] = []
  const url = await listen(
    createServer((req, res) => {
      received.push(`${req.headers.authorization} ${req.headers['x-tenant-id']}`)
      res.end()
    }),
  )
  const args = [...schedule(url, 100, 0.2), '--warmup', '0.1']
  const { result } = await paced([...args, '--pool', pool, '--pool-start', '5', '--tenant', 't1'])
  assert.equal(result.poolUsed, 30)
  assert.deepEqual(
    received.sort(),
    tokens
      .slice(5, 35)
      .map((t) => `Bearer ${t} t1`)
      .sort(),
  )
  await assert.rejects(paced([...args, '--pool', pool, '--pool-start', '30']), /20 unused tokens/)
})

test('percentiles are nearest-rank over the sorted sample', () => {
  const sample = Float64Array.from({ length: 1000 }, (_, i) => 1000 - i)
  const summary = summarize(sample)
  assert.deepEqual(
    [summary.count, summary.p50Ms, summary.p99Ms, summary.p999Ms, summary.maxMs],
    [1000, 500, 990, 999, 1000],
  )
  assert.equal(percentile(Float64Array.of(7), 99.9), 7)
  assert.ok(Number.isNaN(percentile(new Float64Array(0), 50)))
})
