/**
 * `serve` from the bin runs with glibc's malloc tuned (issue #36): it starts itself again (same
 * pid) with MALLOC_ARENA_MAX=2 and MALLOC_MMAP_THRESHOLD_=32768 unless the operator set them,
 * read from the running process's own environment (/proc/<pid>/environ).
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { collectOutput } from '../helpers/child-output.ts'
import { spawnTokengate } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const linux = process.platform === 'linux' ? false : 'glibc tuning is Linux only'

/** Starts `serve` with `env`, waits for its JSON line, returns its environment and stops it. */
async function servedEnvironment(env: Record<string, string>): Promise<Map<string, string>> {
  const child = spawnTokengate(['serve', '--http', '--listen', '127.0.0.1:0', '--json'], {
    env: { TOKENGATE_DATA_DIR: tempDir('serve-malloc-'), ...env },
  })
  child.stdin?.end()
  const output = collectOutput(child)
  const exited = new Promise((resolve) => child.once('exit', resolve))
  try {
    for (let i = 0; i < 400 && !output.stdout().includes('"url"'); i++) await sleep(25)
    assert.match(output.stdout(), /"url"/, `serve did not start: ${output.stderr()}`)
    const environ = readFileSync(`/proc/${child.pid}/environ`, 'utf8')
    return new Map(
      environ
        .split('\0')
        .filter(Boolean)
        .map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]),
    )
  } finally {
    child.kill('SIGTERM')
    await exited
  }
}

describe('serve and glibc malloc', { skip: linux }, () => {
  it('runs with two arenas and a fixed 32 KB mmap threshold', async () => {
    const env = await servedEnvironment({})
    assert.equal(env.get('MALLOC_ARENA_MAX'), '2')
    assert.equal(env.get('MALLOC_MMAP_THRESHOLD_'), '32768')
  })

  it("keeps the operator's own values", async () => {
    const env = await servedEnvironment({ MALLOC_MMAP_THRESHOLD_: '65536' })
    assert.equal(env.get('MALLOC_MMAP_THRESHOLD_'), '65536')
    assert.equal(env.get('MALLOC_ARENA_MAX'), '2')
  })
})
