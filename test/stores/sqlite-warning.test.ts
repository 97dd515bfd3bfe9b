import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import http from 'node:http'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { needsSources, serveProcess } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const run = promisify(execFile)
const SOURCE_INDEX = fileURLToPath(new URL('../../src/index.ts', import.meta.url))

test("the bin drops Node 22's SQLite ExperimentalWarning and prints every other warning", async () => {
  const printed: string[] = []
  process.on('warning', (warning) => printed.push(warning.message))
  await import('../../src/stores/sqlite-warning.ts')
  process.emitWarning(
    'SQLite is an experimental feature and might change at any time',
    'ExperimentalWarning',
  )
  process.emitWarning(new Error('SQLite is an experimental feature (as an Error)'))
  process.emitWarning('something else', 'Warning')
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(printed, ['something else'])
})

// Node 22 emits the warning while it loads node:sqlite: in a thread whose static ESM graph
// imports it, that is before any module of the graph (the filter too) has run. Emulated here
// on Node 24 (node22-sqlite-warning.ts) in every process and thread; each warning that gets
// past a filter is written to stderr at once, naming its process and thread.
const NODE_22_WARNING = `--import=${fileURLToPath(new URL('./node22-sqlite-warning.ts', import.meta.url))}`

function statusOf(url: string, pat: string): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false, headers: { authorization: `Bearer ${pat}` } }, (res) => {
        res.resume()
        resolve(res.statusCode)
      })
      .on('error', reject)
  })
}

function printedBy(stderr: string): string[] {
  return [...stderr.matchAll(/unfiltered ExperimentalWarning \(pid (\d+), thread (\d+)\)/g)].map(
    (match) => `pid ${match[1]} thread ${match[2]}`,
  )
}

for (const workers of ['1', '2']) {
  test(`serve with ${workers} worker(s): no process (primary or worker) and no writer thread prints node:sqlite's warning`, {
    skip: needsSources('the Node 22 emulation preloads a TypeScript file'),
    timeout: 60_000,
  }, async () => {
    const served = await serveProcess(
      ['serve', '--dev', '--http', '--listen', '127.0.0.1:0', '--json'],
      {
        env: {
          NODE_OPTIONS: NODE_22_WARNING,
          TOKENGATE_DATA_DIR: tempDir('tg-sqlite-warning-data-'),
          TOKENGATE_WORKERS: workers,
        },
      },
    )
    // A connection each: node:cluster hands them to the workers in turn. Each PAT use is a
    // write for its worker's writer thread (its last-used time).
    const pat = served.document.devSeed?.demoPat
    assert.ok(pat)
    for (let i = 0; i < 4; i++)
      assert.equal(await statusOf(`${served.document.url}/api/v1/me`, pat), 200)
    // A graceful stop flushes the writer threads' queues: each has loaded its graph by then.
    await served.stop()
    assert.deepEqual(printedBy(served.stderr()), [], served.stderr())
  })
}

test("the library leaves its host's warning alone; its own writer thread drops it", {
  skip: needsSources('the Node 22 emulation preloads a TypeScript file'),
}, async () => {
  const dataDir = tempDir('tg-sqlite-warning-library-')
  const script = `
    const { createTokengate } = await import(${JSON.stringify(SOURCE_INDEX)})
    const gate = await createTokengate({ dataDir: ${JSON.stringify(dataDir)} })
    // Answered by the writer thread: it has loaded its modules by then.
    await gate.store.appendAudit([])
    await gate.close()
  `
  const { stderr } = await run(process.execPath, [
    NODE_22_WARNING,

    '-e',
    script,
  ])
  assert.deepEqual(printedBy(stderr), [`pid ${stderr.match(/pid (\d+)/)?.[1]} thread 0`], stderr)
})
