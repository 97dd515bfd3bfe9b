/**
 * When the SQLite writer thread starts: once the database is migrated, so that a server's first
 * request that needs it (a quota reservation, its first counted use) never waits for a thread
 * to start; a store opened without migrating (a CLI command, a cluster worker) starts it on its
 * first write, as before.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { openSqliteWithWriter } from '../../src/stores/sqlite-writer.ts'
import { tempDir } from '../helpers/temp-dir.ts'

/** The worker threads of this process, from Node's diagnostic report. */
const workerThreads = () => (process.report.getReport() as { workers: unknown[] }).workers.length

/** The report lists a thread once it runs: `count` threads, waiting up to 5 s for a start. */
async function threadsReach(count: number): Promise<number> {
  for (let i = 0; i < 500 && workerThreads() !== count; i++) await sleep(10)
  return workerThreads()
}

test('the writer thread is running once the store is migrated, before any write', async () => {
  const before = workerThreads()
  const store = openSqliteWithWriter(join(tempDir('writer-start-'), 'tokengate.db'))
  try {
    assert.equal(workerThreads(), before, 'opening alone starts no thread')
    await store.migrate()
    assert.equal(await threadsReach(before + 1), before + 1, 'started by the migration')
  } finally {
    await store.close()
  }
  assert.equal(workerThreads(), before, 'close stops it')
})

test('without a migration the thread starts on the first write', async () => {
  const dir = tempDir('writer-start-')
  const path = join(dir, 'tokengate.db')
  const migrated = openSqliteWithWriter(path)
  await migrated.migrate()
  await migrated.close()
  const before = workerThreads()
  const store = openSqliteWithWriter(path)
  try {
    assert.equal(workerThreads(), before)
    await store.recordPatUse(new Map([['tok_unknown', 1_000]]))
    assert.equal(workerThreads(), before + 1)
  } finally {
    await store.close()
  }
})
