/**
 * The benchmarks' server (bench/servers/tokengate.ts, started as the benches start it) runs with
 * the process settings `tokengate serve` runs with (issue #36, seventh session): glibc malloc's
 * environment and the Node flags, read from each running process (/proc/<pid>/environ and
 * cmdline), and V8's heap bound and the idle collector through the one function both call.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import {
  PRODUCTION_NODE_FLAGS,
  SERVED_MALLOC_ENV,
  serveAsProduction,
} from '../../src/lib/serving-process.ts'
import { collectOutput } from '../helpers/child-output.ts'
import { needsSources, spawnTokengate } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const linux = process.platform === 'linux' ? false : '/proc is Linux only'

/** The settings of a running process that `serve` chooses: malloc's variables and Node's flags. */
function settingsOf(pid: number): { malloc: string[]; nodeFlags: string[] } {
  const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')
  const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
  return {
    malloc: environ.filter((entry) => entry.startsWith('MALLOC_')).sort(),
    // Node's own flags: those before the script.
    nodeFlags: cmdline.slice(
      1,
      cmdline.findIndex((arg, i) => i > 0 && !arg.startsWith('-')),
    ),
  }
}

/** Waits for `ready` in the child's stdout, reads its settings and stops it. */
async function settingsWhenReady(child: ChildProcess, ready: RegExp) {
  child.stdin?.end()
  const output = collectOutput(child)
  const exited = new Promise((resolve) => child.once('exit', resolve))
  try {
    for (let i = 0; i < 1200 && !ready.test(output.stdout()); i++) await sleep(25)
    assert.match(output.stdout(), ready, `did not start: ${output.stderr()}`)
    return settingsOf(child.pid as number)
  } finally {
    child.kill('SIGTERM')
    await exited
  }
}

describe('the production Node flags', () => {
  // Where they are written out because the place cannot import PRODUCTION_NODE_FLAGS.
  const flags = PRODUCTION_NODE_FLAGS.join(' ')
  const read = (path: string) => readFileSync(join(ROOT, path), 'utf8')

  it("are the bin's #! line, npm start's and the container image's", () => {
    assert.equal(read('bin/tokengate.js').split('\n')[0], `#!/usr/bin/env -S node ${flags}`)
    const { scripts } = JSON.parse(read('package.json')) as { scripts: Record<string, string> }
    assert.equal(scripts.start, `node ${flags} bin/tokengate.js serve --dev`)
    const containerfile = read('Containerfile')
    // The image's `tokengate` for `podman exec`: a `#!` line without `env -S` gives Node all
    // its flags as one argument, which Node refuses ("illegal value" with two: test:image).
    assert.equal(PRODUCTION_NODE_FLAGS.length, 1, "the image's exec bin carries one flag only")
    assert.ok(
      containerfile.includes(`'#!/usr/local/bin/node ${flags}\\\\n`),
      "the image's exec bin",
    )
    const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(containerfile)?.[1] ?? '[]'
    assert.deepEqual(JSON.parse(entrypoint), [
      'node',
      ...PRODUCTION_NODE_FLAGS,
      '/opt/tokengate/node_modules/tokengate/bin/tokengate.js',
    ])
  })

  it('are what the docs tell an operator who starts Node another way', () => {
    for (const doc of ['docs/scale-out.md', 'docs/container.md']) {
      assert.ok(read(doc).includes(`node ${flags} `), `${doc}: \`node ${flags} …\``)
    }
    assert.ok(read('docs/scale-out.md').includes(`NODE_OPTIONS=${flags}`))
  })
})

describe('the malloc environment', () => {
  it("is the container image's, which sets it to spare serve its restart", () => {
    const containerfile = readFileSync(join(ROOT, 'Containerfile'), 'utf8')
    for (const [name, value] of Object.entries(SERVED_MALLOC_ENV)) {
      const set = new RegExp(`^\\s+${name}=${value} \\\\$`, 'm')
      assert.ok(set.test(containerfile), `Containerfile: ENV ... ${name}=${value}`)
    }
  })
})

describe('the bench server and serve', { skip: linux || needsSources('runs bench/') }, () => {
  it('run with the same malloc environment and Node flags', async () => {
    const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' }
    const served = await settingsWhenReady(
      spawnTokengate(['serve', '--http', '--listen', '127.0.0.1:0', '--json'], {
        env: { TOKENGATE_DATA_DIR: tempDir('serve-settings-') },
      }),
      /"url"/,
    )
    const bench = await settingsWhenReady(
      spawn(
        process.execPath,
        [...PRODUCTION_NODE_FLAGS, 'bench/servers/tokengate.ts', tempDir('bench-fixtures-'), '0'],
        { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] },
      ),
      /READY \d+/,
    )
    assert.deepEqual(served.malloc, ['MALLOC_ARENA_MAX=2', 'MALLOC_MMAP_THRESHOLD_=32768'])
    assert.deepEqual(bench, served)
  })

  it('one function bounds V8 heap growth and starts the idle collector for one process', () => {
    const one = serveAsProduction({ execArgv: [], nodeOptions: undefined, workers: 1 })
    try {
      assert.equal(one.heapGrowingPercent, 50)
      assert.equal(one.idle?.collections, 0)
    } finally {
      one.stop()
    }
    const kept = serveAsProduction({
      execArgv: ['--heap-growing-percent=30'],
      nodeOptions: undefined,
      workers: 1,
    })
    kept.stop()
    assert.equal(kept.heapGrowingPercent, undefined, "the operator's flag is kept")
    const pool = serveAsProduction({ execArgv: [], nodeOptions: undefined, workers: 2 })
    assert.equal(pool.idle, undefined, 'a pool primary: each worker collects itself')
  })
})
