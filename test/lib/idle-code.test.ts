import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { test } from 'node:test'
import { promisify } from 'node:util'
import { PRODUCTION_NODE_FLAGS } from '../../src/lib/serving-process.ts'

// A process tuned as `serve` tunes it (serveAsProduction) serves requests from itself, goes
// idle, serves 6 s more, goes idle, then grows past its peak by 200 MB of garbage and goes idle
// again. Why: a full collection in an
// idle spell cleared the objects the load's optimized code embedded and V8 discarded that code
// ("embedded weak objects cleared" under --trace-deopt), so the first seconds after every idle
// spell ran unoptimized (issue #36, bench/README.md "After idle").
const SERVED = `
  import { createServer, request } from 'node:http'
  import { serveAsProduction } from ${JSON.stringify(new URL('../../src/lib/serving-process.ts', import.meta.url).href)}
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
  const server = createServer((req, res) => {
    const body = JSON.stringify({ path: req.url, headers: Object.keys(req.headers), at: Date.now() })
    res.writeHead(200, { 'content-type': 'application/json' }).end(body)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  // The process starts at its peak: 100 MB held while the collector takes its first reading.
  let held = Array.from({ length: 1_000_000 }, (_, i) => ({ i, s: 'held ' + i }))
  const served = serveAsProduction({ workers: 1, execArgv: process.execArgv, nodeOptions: undefined })
  held = null
  const get = (i) => new Promise((resolve, reject) => {
    request({ port, host: '127.0.0.1', path: '/p/' + i, headers: { 'x-n': String(i) } }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (chunk) => { body += chunk }).on('end', () => resolve(JSON.parse(body)))
    }).on('error', reject).end()
  })
  const load = async (ms) => {
    for (let i = 0, end = Date.now() + ms; Date.now() < end; i++) await get(i)
  }
  await load(3000)
  await sleep(3000)
  await load(6000)
  // V8's trace lines reach stdout through C's buffer, out of order with process.stdout's: a
  // forced scavenge (which never discards code) marks the idle spell in V8's own stream.
  const mark = () => gc({ type: 'minor' })
  const print = (line) => process.stdout.write('\\n' + line + '\\n')
  mark()
  await sleep(3000)
  mark()
  const before = served.idle.collections
  let grown = Array.from({ length: 2_000_000 }, (_, i) => ({ i, s: 'grown ' + i }))
  await sleep(10)
  const peak = process.memoryUsage.rss()
  grown = null
  await sleep(3000)
  print('GROWN ' + (served.idle.collections - before) + ' ' + Math.round((peak - process.memoryUsage.rss()) / 1048576))
  served.stop()
  server.close()
`

test('a served process keeps its optimized code across idle without growth, and collects after growth', async () => {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [
      ...PRODUCTION_NODE_FLAGS,
      '--expose-gc',
      '--trace-gc',
      '--trace-deopt',
      '--input-type=module',
      '-e',
      SERVED,
    ],
    { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
  )
  const lines = stdout.split('\n')
  const marks = lines.flatMap((line, at) => (/Scavenge.* testing/.test(line) ? [at] : []))
  assert.equal(marks.length, 2, 'the child marked its idle spell')
  const idleSpell = lines.slice(marks[0], marks[1])
  const [, collectedGrown, returnedMb] = /\nGROWN (\d+) (\d+)/.exec(stdout) ?? []
  const cleared = idleSpell.filter((line) => line.includes('embedded weak objects cleared'))
  assert.deepEqual(cleared, [], 'no optimized code discarded in the idle spell')
  assert.equal(collectedGrown, '1', 'idle after growing past its peak: collected once')
  assert.ok(Number(returnedMb) > 40, `the collection gave the growth back: ${returnedMb} MB`)
})
