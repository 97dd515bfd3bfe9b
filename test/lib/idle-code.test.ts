import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { test } from 'node:test'
import { promisify } from 'node:util'
import { PRODUCTION_NODE_FLAGS, SERVED_MALLOC_ENV } from '../../src/lib/serving-process.ts'

// A process tuned as `serve` tunes it (serveAsProduction, SERVED_MALLOC_ENV) serves requests
// from itself, goes idle, serves more, goes idle, then grows past its peak by 200 MB of garbage
// and goes idle again. Why: a full collection in an idle spell cleared the objects the load's
// optimized code embedded and V8 discarded that code ("embedded weak objects cleared" under
// --trace-deopt), so the first seconds after every idle spell ran unoptimized (issue #36,
// bench/README.md "After idle").
// Each load is a count of requests on one kept-alive connection and each idle spell lasts until
// the collector has looked at the idle loop (idleLooks), not a time. Why: loads timed in seconds
// grew RSS with the machine's speed (a connection per request, no full collection meanwhile)
// and on a quiet machine past the collector's 32 MiB, so it collected in the idle spell (1 run
// in 6); a sleep can end before a loaded machine ran the collector's looks.
const SERVED = `
  import { Agent, createServer, request } from 'node:http'
  import { serveAsProduction } from ${JSON.stringify(new URL('../../src/lib/serving-process.ts', import.meta.url).href)}
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
  const until = async (done) => { while (!done()) await sleep(20) }
  const server = createServer((req, res) => {
    const body = JSON.stringify({ path: req.url, headers: Object.keys(req.headers), at: Date.now() })
    res.writeHead(200, { 'content-type': 'application/json' }).end(body)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  // The process starts at its peak: 100 MB held while the collector takes its first reading.
  let held = Array.from({ length: 1_000_000 }, (_, i) => ({ i, s: 'held ' + i }))
  const served = serveAsProduction({ workers: 1, execArgv: process.execArgv, nodeOptions: undefined })
  const startRss = process.memoryUsage.rss()
  held = null
  const get = (i) => new Promise((resolve, reject) => {
    request({ port, host: '127.0.0.1', path: '/p/' + i, agent, headers: { 'x-n': String(i) } }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (chunk) => { body += chunk }).on('end', () => resolve(JSON.parse(body)))
    }).on('error', reject).end()
  })
  let loadGrowth = 0
  const load = async (requests) => {
    for (let i = 0; i < requests; i++) await get(i)
    loadGrowth = Math.max(loadGrowth, process.memoryUsage.rss() - startRss)
  }
  const idleSpell = (looks) => {
    const from = served.idle.idleLooks
    return until(() => served.idle.idleLooks >= from + looks)
  }
  await load(5000)
  await idleSpell(4)
  await load(30000)
  // V8's trace lines reach stdout through C's buffer: a forced scavenge (which never discards
  // code) marks the idle spell in V8's own stream. The child's report goes to stderr.
  const mark = () => gc({ type: 'minor' })
  mark()
  const beforeSpell = served.idle.collections
  await idleSpell(4)
  mark()
  const collectedInSpell = served.idle.collections - beforeSpell
  const before = served.idle.collections
  let grown = Array.from({ length: 2_000_000 }, (_, i) => ({ i, s: 'grown ' + i }))
  await sleep(10)
  const peak = process.memoryUsage.rss()
  grown = null
  // Until the collection, or 8 idle looks without one (then it is not coming).
  const looksAfterGrowth = served.idle.idleLooks
  await until(() => served.idle.collections > before || served.idle.idleLooks >= looksAfterGrowth + 8)
  const returned = peak - process.memoryUsage.rss()
  await idleSpell(2)
  const mb = (bytes) => Math.round(bytes / 1048576)
  process.stderr.write('\\nREPORT ' + JSON.stringify({
    collectedInSpell,
    collectedGrown: served.idle.collections - before,
    returnedMb: mb(returned),
    loadGrowthMb: mb(loadGrowth),
  }) + '\\n')
  served.stop()
  server.close()
  agent.destroy()
`

test('a served process keeps its optimized code across idle without growth, and collects after growth', async () => {
  const { stdout, stderr } = await promisify(execFile)(
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
    {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      env: { ...process.env, ...SERVED_MALLOC_ENV },
    },
  )
  const report = /\nREPORT (.*)\n/.exec(stderr)?.[1]
  assert.ok(report, `the child reported: ${stderr}`)
  const { collectedInSpell, collectedGrown, returnedMb, loadGrowthMb } = JSON.parse(report)
  assert.equal(
    collectedInSpell,
    0,
    `idle without growth past the peak: not collected (the loads grew RSS ${loadGrowthMb} MB)`,
  )
  const lines = stdout.split('\n')
  const marks = lines.flatMap((line, at) => (/Scavenge.* testing/.test(line) ? [at] : []))
  assert.equal(marks.length, 2, 'the child marked its idle spell')
  const idleSpell = lines.slice(marks[0], marks[1])
  const cleared = idleSpell.filter((line) => line.includes('embedded weak objects cleared'))
  assert.deepEqual(cleared, [], 'no optimized code discarded in the idle spell')
  assert.equal(collectedGrown, 1, 'idle after growing past its peak: collected once')
  assert.ok(returnedMb > 40, `the collection gave the growth back: ${returnedMb} MB`)
})
