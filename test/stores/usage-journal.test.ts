/**
 * The usage journal (issue #32): counts survive a SIGKILL and are added exactly once, by
 * whichever process comes next, whatever its PID (real processes, real SIGKILLs, SQLite).
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { openPostgresStore } from '../../src/stores/postgres.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import type { Store, UsageRow } from '../../src/stores/store.ts'
import { openUsageJournal, recoverUsageJournal } from '../../src/stores/usage-journal.ts'
import { createUsageWriter } from '../../src/stores/usage-writer.ts'
import { testClock } from '../helpers/clock.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const T = Date.UTC(2026, 2, 10, 9, 59, 30)
const SLICING = { maxSubjects: 100_000, subjectsPerWrite: 2 }
const src = (path: string) => new URL(`../../src/${path}`, import.meta.url).href

/**
 * A process that counts `keys` keys of tenant `acme` (key i used i + 1 times) with a journaled
 * writer on the store at `db`, flushes with `flush` ('none': never; 'first-slice': the store
 * takes the first write and never answers the next) and stays alive until killed.
 */
async function countingProcess(
  db: string,
  dir: string,
  keys: number,
  flush: 'none' | 'first-slice',
): Promise<ChildProcess> {
  const script = `
import { openSqliteStore } from '${src('stores/sqlite.ts')}'
import { openUsageJournal } from '${src('stores/usage-journal.ts')}'
import { createUsageWriter } from '${src('stores/usage-writer.ts')}'
const store = openSqliteStore(${JSON.stringify(db)})
let writes = 0
const stalling = {
  addUsage: (rows, options) => (++writes === 1 ? store.addUsage(rows, options) : new Promise(() => {})),
}
const journal = openUsageJournal(${JSON.stringify(dir)}, ${JSON.stringify(SLICING)})
const usage = createUsageWriter(stalling, {
  clock: { now: () => ${T} },
  flushIntervalMs: 0,
  subjectsPerWrite: ${SLICING.subjectsPerWrite},
  journal,
})
for (let key = 0; key < ${keys}; key++) {
  for (let use = 0; use <= key; use++) usage.count('allowed', 'acme', 'k' + key)
}
usage.count('unauthorized', null, null)
if (${JSON.stringify(flush)} === 'first-slice') {
  void usage.flush()
  while (writes < 2) await new Promise((resolve) => setTimeout(resolve, 5))
}
process.stdout.write('counted\\n')
setInterval(() => {}, 1000)
`
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  await once(child.stdout as NodeJS.ReadableStream, 'data')
  return child
}

async function killed(child: ChildProcess) {
  child.kill('SIGKILL')
  if (child.exitCode === null && child.signalCode === null) await once(child, 'exit')
}

function setUp() {
  const dir = tempDir('tg-journal-')
  const db = join(dir, 'db.sqlite')
  const store = openSqliteStore(db)
  return { dir: join(dir, 'usage-journal'), db, store }
}

/** Minute counts per key of `acme`, and the total's allowed and unauthorized. */
async function counts(store: ReturnType<typeof openSqliteStore>, keys: number) {
  const perKey: number[] = []
  for (let key = 0; key < keys; key++) {
    const rows = await store.readUsage({
      scope: 'key',
      subject: `k${key}`,
      resolution: 'minute',
      since: 0,
      until: T + 60_000,
    })
    perKey.push(rows.reduce((sum, row) => sum + row.allowed, 0))
  }
  const [all] = await store.readUsage({
    scope: 'all',
    subject: '',
    resolution: 'day',
    since: 0,
    until: T + 86_400_000,
  })
  return { perKey, allowed: all?.allowed ?? 0, unauthorized: all?.unauthorized ?? 0 }
}

const expected = (keys: number) => ({
  perKey: Array.from({ length: keys }, (_, key) => key + 1),
  allowed: (keys * (keys + 1)) / 2,
  unauthorized: 1,
})

describe('usage journal', () => {
  it('journals every count; a flush stores them and deletes the segment; close leaves nothing', async (t) => {
    const { dir, store } = setUp()
    t.after(() => store.close())
    await store.migrate()
    const usage = createUsageWriter(store, {
      clock: testClock(T),
      flushIntervalMs: 0,
      journal: openUsageJournal(dir, SLICING),
    })
    usage.count('allowed', 'acme', 'k0')
    const segments = () => readdirSync(dir).filter((name) => name.endsWith('.jsonl'))
    const [first] = segments()
    assert.ok(first)
    await usage.flush()
    assert.ok(!segments().includes(first), 'stored: deleted')
    usage.count('allowed', 'acme', 'k0')
    await usage.close()
    assert.deepEqual(readdirSync(dir), [], 'no segment and no lock file left')
    assert.deepEqual((await counts(store, 1)).perKey, [2])
  })

  it('a SIGKILLed process’s counts are added by the next one, once', async (t) => {
    const { dir, db, store } = setUp()
    t.after(() => store.close())
    await store.migrate()
    const child = await countingProcess(db, dir, 5, 'none')
    t.after(() => killed(child))
    assert.deepEqual(await recoverUsageJournal(dir, store, SLICING), { segments: 0, unreadable: 0 })
    assert.equal((await counts(store, 5)).allowed, 0, 'a live owner’s journal is left alone')
    await killed(child)
    assert.equal((await recoverUsageJournal(dir, store, SLICING)).segments, 1)
    assert.deepEqual(await counts(store, 5), expected(5))
    assert.equal((await recoverUsageJournal(dir, store, SLICING)).segments, 0)
    assert.deepEqual(await counts(store, 5), expected(5), 'nothing added twice')
  })

  it('killed in the middle of a flush: what was stored before the kill is not added again', async (t) => {
    const { dir, db, store } = setUp()
    t.after(() => store.close())
    await store.migrate()
    // Two subjects per write: the first write (the total and tenant acme) is stored, the
    // second (k0, k1) never answers, and the process is killed.
    const child = await countingProcess(db, dir, 5, 'first-slice')
    t.after(() => killed(child))
    await killed(child)
    const before = await counts(store, 5)
    assert.equal(before.allowed, 15, 'the first slice (the total) was stored before the kill')
    assert.equal(before.perKey[0], 0, 'k0 was not')
    await recoverUsageJournal(dir, store, SLICING)
    assert.deepEqual(await counts(store, 5), expected(5))
  })

  it('a recovery the store refused at start is tried again by the next flush that stores, with no count of its own', async (t) => {
    const { dir, db, store } = setUp()
    t.after(() => store.close())
    await store.migrate()
    const child = await countingProcess(db, dir, 5, 'none')
    t.after(() => killed(child))
    await killed(child)
    // The store is down while this process starts: its recovery fails.
    let down = true
    const flaky: Pick<Store, 'addUsage'> = {
      addUsage: (rows, options) =>
        down ? Promise.reject(new Error('store down')) : store.addUsage(rows, options),
    }
    const recover = () => recoverUsageJournal(dir, flaky, SLICING)
    await assert.rejects(recover(), /store down/)
    const usage = createUsageWriter(flaky, {
      clock: testClock(T),
      flushIntervalMs: 0,
      journal: openUsageJournal(dir, SLICING),
      recoverJournal: recover,
    })
    await assert.rejects(usage.flush(), /store down/, 'still down: kept for the next flush')
    down = false
    // An idle instance (nothing counted since its start) recovers too.
    await usage.flush()
    assert.deepEqual(await counts(store, 5), expected(5))
    await usage.flush()
    assert.deepEqual(await counts(store, 5), expected(5), 'nothing added twice')
    await usage.close()
    assert.deepEqual(readdirSync(dir), [], 'no segment and no lock file left')
  })
})

/** `addUsage` with a mark, on both stores: a mark applies its rows once, in one transaction. */
function markedWrites(open: () => Promise<Store>) {
  it('rows under a mark already applied are skipped; other marks and no mark add up', async (t) => {
    const store = await open()
    t.after(() => store.close())
    const row = (allowed: number): UsageRow => ({
      scope: 'key',
      subject: 'k-mark',
      resolution: 'minute',
      bucketStart: T,
      tenantId: 'acme',
      allowed,
      unauthorized: 0,
      forbidden: 0,
      limited: 0,
    })
    await store.addUsage([row(1)], { mark: 'seg.1:0:0' })
    await store.addUsage([row(10)], { mark: 'seg.1:0:0' })
    await store.addUsage([row(100)], { mark: 'seg.1:0:2' })
    await store.addUsage([row(1000)])
    await store.addUsage([row(1000)], {})
    const [bucket] = await store.readUsage({
      scope: 'key',
      subject: 'k-mark',
      resolution: 'minute',
      since: 0,
      until: T + 1,
    })
    assert.equal(bucket?.allowed, 2101)
  })
}

describe('addUsage with a mark (SQLite)', () => {
  markedWrites(async () => {
    const store = openSqliteStore(join(tempDir('tg-mark-'), 'db.sqlite'))
    await store.migrate()
    return store
  })
})

describe('addUsage with a mark (Postgres)', { skip: skipReason('postgres') }, () => {
  let postgres: PostgresServer
  before(async () => {
    postgres = await startPostgres()
  })
  after(() => postgres?.stop())
  markedWrites(async () => {
    const store = await openPostgresStore(await postgres.createDatabase())
    await store.migrate()
    return store
  })
})

describe('usage journal lines', () => {
  it('a torn last line and malformed lines are skipped and counted, never added', async (t) => {
    const { dir, store } = setUp()
    t.after(() => store.close())
    await store.migrate()
    const { mkdirSync, writeFileSync } = await import('node:fs')
    mkdirSync(dir, { recursive: true })
    const minute = T / 60_000 - ((T / 60_000) % 1)
    writeFileSync(
      join(dir, '0123456789abcdef.1.jsonl'),
      [
        '#usage 100000 2',
        `${minute} 0 acme k0`,
        `${minute} 0 acme k0 extra`,
        `${minute} 9 acme k0`,
        `${minute} 0 ac${minute} 0 acme k1`,
        `${minute} 0 acme k0`,
        `${minute} 0 acme k1`.slice(0, -1), // torn: no newline
      ].join('\n'),
    )
    const result = await recoverUsageJournal(dir, store, SLICING)
    assert.deepEqual(result, { segments: 1, unreadable: 4 })
    const [k0, k1] = (await counts(store, 2)).perKey
    assert.deepEqual([k0, k1], [2, 0])
  })
})
