/**
 * How fresh a process's view of the change log is (ChangeFollower `readAsOf`/`currentAsOf`):
 * what a cached forward-auth decision's expiry is bound to (src/decision/cache-expiry.ts), so
 * it must be the START of the last read that completed, and nothing while the log is
 * unreadable.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ChangeFollower, type ChangeLogReader, type LogEntry } from '../../src/stores/change-log.ts'

function setup() {
  let clock = 1_000
  let failing = false
  const entries: LogEntry[] = []
  const reader: ChangeLogReader = {
    head: async () => 0,
    readAfter: async (seq) => {
      clock += 40 // the read itself takes time: the start is what counts
      if (failing) throw new Error('store down')
      return { entries: entries.filter((e) => e.seq > seq), lowest: entries[0]?.seq ?? null }
    },
    prune: async () => {},
  }
  const follower = new ChangeFollower({ reader, emit: () => {}, pollMs: 0, now: () => clock })
  return {
    follower,
    advance: (ms: number) => {
      clock += ms
    },
    fail: (on: boolean) => {
      failing = on
    },
    write: (seq: number) => entries.push({ seq, kind: 'pat', subject: 'h', at: clock }),
  }
}

test('before any read nothing is known', () => {
  const { follower } = setup()
  assert.equal(follower.currentAsOf, undefined)
  assert.equal(follower.status.readAsOf, undefined)
})

test('readAsOf is when the last complete read started', async () => {
  const { follower, advance, write } = setup()
  await follower.catchUp()
  assert.equal(follower.currentAsOf, 1_000)
  advance(500)
  write(1)
  await follower.catchUp()
  assert.equal(follower.currentAsOf, 1_540, 'the start of the second read, not its end (1,580)')
})

test('while the log cannot be read, nothing is current; the last good read is kept in status', async () => {
  const { follower, advance, fail } = setup()
  await follower.catchUp()
  advance(500)
  fail(true)
  await follower.catchUp()
  assert.equal(follower.currentAsOf, undefined)
  assert.equal(follower.status.readAsOf, 1_000)
  fail(false)
  advance(100)
  await follower.catchUp()
  assert.equal(follower.currentAsOf, 1_680)
})
