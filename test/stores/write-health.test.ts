/**
 * Store write health (issue #32): failed writes and a (nearly) full data directory are one
 * episode with one log line at its start and one at its end, never a line per failed write;
 * the SQLite disk reserve is part of it (an episode lasts until the reserve is back).
 */
import assert from 'node:assert/strict'
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { DISK_RESERVE_FILE, hasDiskReserve } from '../../src/stores/disk-reserve.ts'
import { createStoreWriteHealth, trackStoreWrites } from '../../src/stores/write-health.ts'
import { tempDir } from '../helpers/temp-dir.ts'

function recordingLog() {
  const lines: string[] = []
  return {
    lines,
    log: {
      warn: (_obj: object, msg: string) => lines.push(`warn ${msg}`),
      error: (_obj: object, msg: string) => lines.push(`error ${msg}`),
    },
  }
}

describe('store write health', () => {
  it('many failed writes are one episode: one line when it starts, one when it ends', async () => {
    const { lines, log } = recordingLog()
    const health = createStoreWriteHealth({ log })
    let failing = true
    const store = trackStoreWrites(
      {
        appendAudit: async () => {
          if (failing) throw Object.assign(new Error('database or disk is full'), { errcode: 13 })
        },
        ping: async () => 'pong',
      },
      health,
    )
    for (let i = 0; i < 50; i++) await store.appendAudit().catch(() => {})
    assert.deepEqual(health.state().areas, ['appendAudit'])
    assert.equal(health.state().failures, 50)
    assert.equal(await store.ping(), 'pong')
    failing = false
    await store.appendAudit()
    assert.equal(health.state().failing, false)
    assert.equal(health.state().episodes, 1)
    assert.equal(lines.length, 2, lines.join('\n'))
    assert.match(lines[0] as string, /^error store writes failing/)
    assert.match(lines[1] as string, /^warn store writes succeed again/)
    health.close()
  })

  it('a missing disk reserve keeps the episode going until it is back', () => {
    const { log } = recordingLog()
    const dir = tempDir('tg-write-health-')
    const health = createStoreWriteHealth({ log, dataDir: dir, reserve: true, pollMs: 0 })
    assert.ok(hasDiskReserve(dir), 'created at start')
    assert.equal(health.state().failing, false)
    health.close()
    rmSync(join(dir, DISK_RESERVE_FILE))
    // A fresh tracker with too high a floor: no room for the reserve, so the disk is failing.
    const tight = createStoreWriteHealth({
      log,
      dataDir: dir,
      reserve: true,
      pollMs: 0,
      minFreeBytes: Number.MAX_SAFE_INTEGER,
    })
    assert.deepEqual(tight.state().areas, ['disk'])
    assert.equal(hasDiskReserve(dir), false)
    tight.close()
  })

  it('while the SQLite disk is full, bulk writes are held back, not sent to the store', async () => {
    const { log } = recordingLog()
    const dir = tempDir('tg-write-hold-')
    const full = createStoreWriteHealth({
      log,
      dataDir: dir,
      reserve: true,
      pollMs: 0,
      minFreeBytes: Number.MAX_SAFE_INTEGER,
    })
    let called = 0
    const store = trackStoreWrites({ addUsage: async () => void called++ }, full)
    await assert.rejects(store.addUsage(), /held/)
    assert.equal(called, 0, 'the room left is kept for revocations')
    full.close()
    // Postgres (no reserve): the local disk does not hold the store's writes.
    const remote = createStoreWriteHealth({
      log,
      dataDir: dir,
      pollMs: 0,
      minFreeBytes: Number.MAX_SAFE_INTEGER,
    })
    await trackStoreWrites({ addUsage: async () => void called++ }, remote).addUsage()
    assert.equal(called, 1)
    remote.close()
  })
})
