import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { claimOwnerLock, takeOwnerLock } from '../../src/stores/owner-lock.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const ownerLockModule = new URL('../../src/stores/owner-lock.ts', import.meta.url).href

/**
 * Another process's `claimOwnerLock(dir, owner)` (a recoverer: POSIX locks are per process):
 * 'claimed' or 'held'. A claim releases at once, forgetting the file as a recoverer that
 * found nothing of the owner left does.
 */
function claimElsewhere(dir: string, owner: string): string {
  return execFileSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import { claimOwnerLock } from '${ownerLockModule}'
const lock = claimOwnerLock(${JSON.stringify(dir)}, ${JSON.stringify(owner)})
lock?.release(true)
process.stdout.write(lock ? 'claimed' : 'held')`,
    ],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  )
}

const ownerOf = (path: string) => /([^/]+)\.lock$/.exec(path)?.[1] ?? ''

describe('owner locks', () => {
  it('a fresh lock file claimed and forgotten by a recoverer while the taker was locking it: the taker takes another id, not the unlinked file', () => {
    const dir = tempDir('tg-owner-lock-')
    const raced: string[] = []
    const lock = takeOwnerLock(dir, {
      beforeLock(path) {
        if (raced.length > 0) return
        raced.push(ownerOf(path))
        assert.equal(claimElsewhere(dir, ownerOf(path)), 'claimed')
      },
    })
    try {
      assert.notEqual(lock.owner, raced[0])
      assert.equal(existsSync(join(dir, `${lock.owner}.lock`)), true)
      assert.equal(claimElsewhere(dir, lock.owner), 'held')
    } finally {
      lock.release(true)
    }
  })

  it('... and a later recoverer made the path anew meanwhile: the taker does not believe it owns that id', () => {
    const dir = tempDir('tg-owner-lock-')
    let raced = false
    const lock = takeOwnerLock(dir, {
      beforeLock(path) {
        if (raced) return
        raced = true
        assert.equal(claimElsewhere(dir, ownerOf(path)), 'claimed')
        // A second recoverer's open creates the file again (an empty SQLite database).
        writeFileSync(path, '')
      },
    })
    try {
      // Another process cannot claim the id of an owner that lives.
      assert.equal(claimElsewhere(dir, lock.owner), 'held')
    } finally {
      lock.release(true)
    }
  })

  it('a fresh lock file unlinked by a releasing recoverer just as the taker locks it (SQLite: disk I/O error): another id, not a failed start', () => {
    const dir = tempDir('tg-owner-lock-')
    let raced = ''
    const lock = takeOwnerLock(dir, {
      beforeLock(path) {
        if (raced !== '') return
        raced = ownerOf(path)
        // As a recoverer's release(true) does, its close still to come.
        unlinkSync(path)
      },
    })
    try {
      assert.notEqual(lock.owner, raced)
      assert.equal(claimElsewhere(dir, lock.owner), 'held')
    } finally {
      lock.release(true)
    }
  })

  it('a claim whose lock file a recoverer forgot while it was locking (the owner is replayed): nothing to claim', () => {
    const dir = tempDir('tg-owner-lock-')
    const owner = '0123456789abcdef'
    for (const recreated of [false, true]) {
      const lock = claimOwnerLock(dir, owner, {
        beforeLock(path) {
          assert.equal(claimElsewhere(dir, owner), 'claimed')
          if (recreated) writeFileSync(path, '')
        },
      })
      lock?.release(true)
      assert.equal(lock, undefined, `path made anew: ${recreated}`)
    }
  })

  it('a process that claims its own live owner (a recovery after its spool opened) keeps its lock', () => {
    const dir = tempDir('tg-owner-lock-')
    const lock = takeOwnerLock(dir)
    try {
      assert.equal(claimOwnerLock(dir, lock.owner), undefined)
      assert.equal(claimOwnerLock(dir, lock.owner), undefined)
      assert.equal(claimElsewhere(dir, lock.owner), 'held')
    } finally {
      lock.release(true)
    }
  })
})
