import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it, type TestContext } from 'node:test'
import { openAuditSpool, recoverAuditSpool } from '../../src/stores/audit-spool.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import type { StoredAuditEvent } from '../../src/stores/store.ts'
import { createAuditWriter } from '../../src/stores/write-behind.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const event = (id: string): StoredAuditEvent => ({
  id,
  time: 1,
  type: 'auth.failed',
  tenantId: null,
  actor: null,
  outcome: 'invalid_token',
  clientAddress: null,
  requestId: null,
  details: {},
})

/** A migrated SQLite store in a fresh directory (closed after the test) and a spool path in it. */
async function migratedStore(t: TestContext) {
  const dir = tempDir('tg-spool-')
  const store = openSqliteStore(join(dir, 'db.sqlite'))
  t.after(() => store.close())
  await store.migrate()
  return { store, spool: join(dir, 'spool') }
}

/** The spool dir's segment files (lock files aside). */
const segments = (dir: string) => readdirSync(dir).filter((name) => name.includes('.jsonl'))

/**
 * A process that spools `count` events in `dir` with this module and stays alive until
 * killed; resolves once they are written.
 */
async function spoolingProcess(dir: string, count: number): Promise<ChildProcess> {
  const module = new URL('../../src/stores/audit-spool.ts', import.meta.url).href
  const child = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import { openAuditSpool } from '${module}'
const spool = openAuditSpool(${JSON.stringify(dir)})
for (let i = 0; i < ${count}; i++) spool.append({ ...${JSON.stringify(event('x'))}, id: 'k' + i })
process.stdout.write('spooled\\n')
setInterval(() => {}, 1000)`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  )
  await once(child.stdout as NodeJS.ReadableStream, 'data')
  return child
}

describe('audit spool', () => {
  it('a segment named for PID 1 (always alive on a host) is stored; an unreadable line is recorded as audit.dropped', async (t) => {
    const { store, spool } = await migratedStore(t)
    openAuditSpool(spool).close()
    // As versions before owner locks named it, written by a server that was PID 1.
    const legacy = join(spool, '1-abc123.jsonl')
    writeFileSync(
      legacy,
      `${JSON.stringify(event('e1'))}\n{"torn": \n${JSON.stringify(event('e2'))}\n`,
    )
    const result = await recoverAuditSpool(spool, store, { queue: false, now: () => 5 })
    assert.deepEqual(result, { recovered: 2, unreadable: 1 })
    assert.equal(existsSync(legacy), false)
    const stored = await store.admin.searchAudit({}, { limit: 10 })
    assert.deepEqual(stored.items.map((e) => e.type).sort(), [
      'audit.dropped',
      'auth.failed',
      'auth.failed',
    ])
    assert.deepEqual(stored.items.find((e) => e.type === 'audit.dropped')?.details, {
      count: 1,
      reason: 'unreadable spool line',
    })
  })

  it('an owner whose lock cannot be taken (an error, not busy) keeps no other gone owner’s segments from being stored', async (t) => {
    const { store, spool } = await migratedStore(t)
    mkdirSync(spool)
    // Listed first (created first): a lock file SQLite refuses, as a lock file unlinked by a
    // racing recoverer while it was opened did in a stress run ("disk I/O error", 1 in 12k).
    writeFileSync(join(spool, '0000000000000001.lock'), 'x'.repeat(4096))
    writeFileSync(join(spool, '0000000000000001.1.jsonl'), `${JSON.stringify(event('q1'))}\n`)
    const gone = ['e1', 'e2', 'e3'].map((id) => JSON.stringify(event(id))).join('\n')
    writeFileSync(join(spool, 'ffffffffffffffff.1.jsonl'), `${gone}\n`)
    await assert.rejects(recoverAuditSpool(spool, store, { queue: false, now: () => 5 }), {
      message: /not a database/,
    })
    const stored = await store.admin.searchAudit({}, { limit: 10 })
    assert.deepEqual(stored.items.map((e) => e.id).sort(), ['e1', 'e2', 'e3'])
    assert.deepEqual(segments(spool), ['0000000000000001.1.jsonl'], 'kept for a later recovery')
  })

  it('a recovery the store refused at start is tried again after a flush stored, without a restart', async (t) => {
    const { store, spool } = await migratedStore(t)
    mkdirSync(spool)
    const gone = ['g1', 'g2'].map((id) => JSON.stringify(event(id))).join('\n')
    writeFileSync(join(spool, 'ffffffffffffffff.1.jsonl'), `${gone}\n`)
    // The store is down while this process starts: its recovery fails.
    let down = true
    const flaky = {
      appendAudit: async (events: readonly StoredAuditEvent[]) => {
        if (down) throw new Error('store down')
        await store.appendAudit(events, { queue: false })
      },
    }
    const recover = () => recoverAuditSpool(spool, flaky, { queue: false, now: () => 5 })
    await assert.rejects(recover(), /store down/)
    const audit = createAuditWriter(flaky, {
      flushIntervalMs: 0,
      queueForDelivery: false,
      spool: openAuditSpool(spool),
      recoverSpool: recover,
    })
    down = false
    audit.write(event('mine'))
    await audit.flush()
    const stored = await store.admin.searchAudit({}, { limit: 10 })
    assert.deepEqual(stored.items.map((e) => e.id).sort(), ['g1', 'g2', 'mine'])
    assert.deepEqual(
      segments(spool).filter((name) => name.startsWith('ffff')),
      [],
      'the gone owner’s segment is gone once stored',
    )
    await audit.close()
    assert.deepEqual(segments(spool), [])
  })

  it('a live owner’s segment is left alone; once it is SIGKILLed, two recoveries store it once', async (t) => {
    const { store, spool } = await migratedStore(t)
    const child = await spoolingProcess(spool, 7)
    t.after(() => child.kill('SIGKILL'))
    const mine = openAuditSpool(spool)
    mine.append(event('mine'))
    const options = { queue: false, now: () => 5 }
    assert.deepEqual(await recoverAuditSpool(spool, store, options), {
      recovered: 0,
      unreadable: 0,
    })
    assert.equal(segments(spool).length, 2, 'the live owners’ segments are kept')

    child.kill('SIGKILL')
    await once(child, 'exit')
    let appended = 0
    const counting = {
      appendAudit: async (events: readonly StoredAuditEvent[]) => {
        appended += events.length
        await store.appendAudit(events, { queue: false })
      },
    }
    const [a, b] = await Promise.all([
      recoverAuditSpool(spool, counting, options),
      recoverAuditSpool(spool, counting, options),
    ])
    assert.equal((a?.recovered ?? 0) + (b?.recovered ?? 0), 7)
    assert.equal(appended, 7, 'replayed by one of the two only')
    assert.equal((await store.admin.searchAudit({}, { limit: 50 })).items.length, 7)
    assert.equal(segments(spool).length, 1, 'only this process’s own segment is left')
    mine.close()
  })

  it('the writer spools each event and deletes segments once stored; close leaves nothing', async (t) => {
    const { store, spool: spoolDir } = await migratedStore(t)
    const writer = createAuditWriter(store, { flushIntervalMs: 0, spool: openAuditSpool(spoolDir) })
    writer.write(event('a'))
    writer.write(event('b'))
    const [segment] = readdirSync(spoolDir)
    assert.ok(segment)
    await writer.flush()
    assert.equal(existsSync(join(spoolDir, segment)), false, 'stored: deleted')
    writer.write(event('c'))
    await writer.close()
    assert.deepEqual(readdirSync(spoolDir), [], 'no segment and no lock file left')
    assert.equal((await store.admin.searchAudit({}, { limit: 10 })).items.length, 3)
  })
})
