/**
 * The SQLite writer thread's heap (issue #36): its young generation stays at its own small
 * bound when the process runs with the bin's `--max-semi-space-size=8` (a process-wide V8
 * flag that used to win over the worker's limit) and with a `--min-semi-space-size` too, a
 * batch far larger than that bound is still written (promoted, never refused), and the thread gives its heap back once idle.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { PRODUCTION_NODE_FLAGS } from '../../src/lib/serving-process.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const FIXTURE = fileURLToPath(new URL('../fixtures/writer-heap.ts', import.meta.url))
const MB = 1024 * 1024

interface Report {
  readonly writerNewSpace: number[]
  readonly writerHeapAfterBatches: number[]
  readonly writerHeapIdle: number[]
  readonly plainNewSpace: number
  readonly stored: number
}

describe('sqlite writer thread heap', () => {
  for (const [how, args, env] of [
    ['as the bin starts it (flags on the command line)', PRODUCTION_NODE_FLAGS, {}],
    ['with a minimum as well', [...PRODUCTION_NODE_FLAGS, '--min-semi-space-size=8'], {}],
  ] as const) {
    it(`keeps its young generation small ${how}, and writes a batch far larger than it`, () => {
      const dir = tempDir('writer-heap-')
      const out = execFileSync(process.execPath, [...args, FIXTURE, join(dir, 'tokengate.db')], {
        encoding: 'utf8',
        env: { ...process.env, ...env },
      })
      const report = JSON.parse(out) as Report
      // One writer thread; its young generation committed at most its 3 MB bound (V8: 2 MB),
      // not the process's 16 MB.
      assert.equal(report.writerNewSpace.length, 1)
      assert.ok(
        (report.writerNewSpace[0] as number) <= 3 * MB,
        `writer young generation ${report.writerNewSpace[0]} bytes`,
      )
      // 300,000 last-used times and 20,000 audit events of ~300 bytes went through it.
      assert.equal(report.stored, 20_000)
      // Idle for 2 s, the thread gave back what those batches left on its heap (119 MB
      // committed right after them in one run, 8 MB after).
      const [after, idle] = [report.writerHeapAfterBatches[0], report.writerHeapIdle[0]] as [
        number,
        number,
      ]
      assert.ok(idle < 16 * MB && idle < after / 2, `writer heap ${after} -> ${idle} bytes`)
      // The flag is the process's again for any isolate started later: a worker without
      // limits grows its young generation up to the flag's 16 MB (left unset: 128 MB).
      assert.ok(
        report.plainNewSpace > 3 * MB && report.plainNewSpace <= 16 * MB,
        `later worker's young generation ${report.plainNewSpace} bytes`,
      )
    })
  }
})
