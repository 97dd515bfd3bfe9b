/**
 * The SQLite writer thread's two lanes (sqlite-writer-worker.ts): quota reservations and
 * releases in one lane, in the order sent, answered before the ordinary writes (audit
 * batches, last-used times, usage counts) queued ahead of them. A reservation waits for
 * its key's release in flight (quota-counter.ts, b058d55): were the release an ordinary
 * write, that reservation would wait behind every queued write on a slow disk, and end in a
 * 503 after the quota's wait.
 *
 * The ordinary writes are held as a slow disk or another process holds them: another
 * connection holds the database's write lock (BEGIN IMMEDIATE), so the thread's first write
 * waits on it and everything else sent meanwhile is queued when the lock goes. The order of
 * the answers is then the thread's order of picking, not a race.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { createQuotaCounter } from '../../src/auth/quota-counter.ts'
import type { Quota } from '../../src/core/ports.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { openSqliteWithWriter } from '../../src/stores/sqlite-writer.ts'
import type { Store } from '../../src/stores/store.ts'
import { testClock } from '../helpers/clock.ts'
import { tempDir } from '../helpers/temp-dir.ts'

async function migratedWriter(): Promise<{ path: string; writer: Store }> {
  const path = join(tempDir('tg-writer-lanes-'), 'db.sqlite')
  const migrated = openSqliteStore(path)
  await migrated.migrate()
  await migrated.close()
  const writer = openSqliteWithWriter(path)
  await writer.migrate() // starts the thread (nothing left to apply)
  return { path, writer }
}

/** Holds the database's write lock from another connection until the returned release. */
function holdWriteLock(path: string): () => void {
  const blocker = new DatabaseSync(path)
  blocker.exec('PRAGMA busy_timeout = 0')
  blocker.exec('BEGIN IMMEDIATE')
  return () => {
    blocker.exec('ROLLBACK')
    blocker.close()
  }
}

describe('sqlite writer thread: the quota lane', () => {
  it('a release and the reservation after it are answered, in that order, before the ordinary writes queued ahead of them', async () => {
    const { path, writer } = await migratedWriter()
    const answered: string[] = []
    const note = (name: string) => (value: unknown) => {
      answered.push(name)
      return value
    }
    try {
      const counter = 'lane-1'
      const periodStart = 0
      const first = await writer.reserveQuota(counter, periodStart, 10, 10)
      assert.equal(first.granted, 10)
      const letGo = holdWriteLock(path)
      const work: Promise<unknown>[] = []
      try {
        // The first ordinary write waits on the lock; the others queue behind it.
        for (let i = 1; i <= 5; i++) {
          work.push(writer.recordPatUse(new Map([[`k${i}`, Date.now()]])).then(note(`w${i}`)))
        }
        work.push(
          writer.releaseQuota(counter, periodStart, first.generation, 1).then(note('release')),
        )
        work.push(writer.reserveQuota(counter, periodStart, 10, 1).then(note('reserve')))
        await sleep(100)
        assert.equal(answered.length, 0, 'nothing answered while the write lock is held')
      } finally {
        letGo()
      }
      await Promise.all(work)
      const release = answered.indexOf('release')
      const reserve = answered.indexOf('reserve')
      assert.ok(release < reserve, `the release before the reservation: ${answered.join(' ')}`)
      assert.ok(
        reserve < answered.indexOf('w2'),
        `the release and reservation pass the held writes: ${answered.join(' ')}`,
      )
      // The reservation counted the use given back: 10 - 1 + 1 used, nothing over.
      assert.equal((await writer.readQuota([counter])).get(counter)?.used, 10)
    } finally {
      await writer.close()
    }
  })

  it('through the quota counter, with ordinary writes held: the use given back is spendable, and never one too many', async () => {
    // The order of answers here is not asserted: the counter sends its reservation only once
    // the release is answered, and the thread goes on with the held writes meanwhile (a race
    // of the two threads); the test above asserts the order the thread picks in.
    const { path, writer } = await migratedWriter()
    try {
      const quotas = createQuotaCounter({ store: writer, clock: testClock() })
      const quota: Quota = { limit: 3, refill: 'none', counter: 'lane-2' }
      for (let i = 0; i < 3; i++) assert.equal(await quotas.take(quota), undefined)
      const letGo = holdWriteLock(path)
      const writes: Promise<unknown>[] = []
      let taken: Promise<unknown>
      try {
        for (let i = 1; i <= 40; i++) {
          writes.push(writer.recordPatUse(new Map([[`k${i}`, Date.now()]])))
        }
        // The request refused for its rate gives its use back; the next request asks for it.
        quotas.giveBack(quota)
        taken = Promise.resolve(quotas.take(quota))
        await sleep(100)
      } finally {
        letGo()
      }
      assert.equal(await taken, undefined, 'the use given back is spendable')
      await Promise.all(writes)
      assert.equal((await quotas.take(quota))?.code, 'quota_exhausted')
      assert.equal((await writer.readQuota([quota.counter])).get(quota.counter)?.used, 3)
    } finally {
      await writer.close()
    }
  })
})
