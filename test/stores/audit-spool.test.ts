import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
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

/** A pid that no process has now (a child that already exited). */
const deadPid = () => spawnSync(process.execPath, ['-e', '']).pid as number

describe('audit spool', () => {
  it('a dead process’s segment is stored and deleted; an unreadable line is recorded as audit.dropped', async (t) => {
    const dir = tempDir('tg-spool-')
    const store = openSqliteStore(join(dir, 'db.sqlite'))
    t.after(() => store.close())
    await store.migrate()
    const spool = join(dir, 'spool')
    openAuditSpool(spool).close()
    const dead = join(spool, `${deadPid()}-abc123.jsonl`)
    writeFileSync(
      dead,
      `${JSON.stringify(event('e1'))}\n{"torn": \n${JSON.stringify(event('e2'))}\n`,
    )
    const live = join(spool, `${process.pid}-def456.jsonl`)
    writeFileSync(live, `${JSON.stringify(event('mine'))}\n`)
    const result = await recoverAuditSpool(spool, store, { queue: false, now: () => 5 })
    assert.deepEqual(result, { recovered: 2, unreadable: 1 })
    assert.equal(existsSync(dead), false)
    assert.ok(existsSync(live), 'a live process’s segment is left alone')
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

  it('the writer spools each event and deletes segments once stored; close leaves nothing', async (t) => {
    const dir = tempDir('tg-spool-')
    const store = openSqliteStore(join(dir, 'db.sqlite'))
    t.after(() => store.close())
    await store.migrate()
    const spoolDir = join(dir, 'spool')
    const writer = createAuditWriter(store, { flushIntervalMs: 0, spool: openAuditSpool(spoolDir) })
    writer.write(event('a'))
    writer.write(event('b'))
    const [segment] = readdirSync(spoolDir)
    assert.ok(segment)
    await writer.flush()
    assert.equal(existsSync(join(spoolDir, segment)), false, 'stored: deleted')
    writer.write(event('c'))
    await writer.close()
    assert.deepEqual(readdirSync(spoolDir), [])
    assert.equal((await store.admin.searchAudit({}, { limit: 10 })).items.length, 3)
  })
})
