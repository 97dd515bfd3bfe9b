import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it, type TestContext } from 'node:test'
import { openSqliteStore, type SqliteStore } from '../../src/stores/sqlite.ts'
import type { AppendAuditOptions, StoredAuditEvent } from '../../src/stores/store.ts'
import {
  type AuditEventInput,
  createAuditWriter,
  createPatUseRecorder,
} from '../../src/stores/write-behind.ts'

const T0 = Date.UTC(2026, 0, 1)

const settle = () => new Promise((resolve) => setImmediate(resolve))

/** A store double that records each call and fails the next `failNext` calls. */
function recordingStore() {
  const uses: Map<string, number>[] = []
  const audits: StoredAuditEvent[][] = []
  const appendOptions: (AppendAuditOptions | undefined)[] = []
  const state = { failNext: 0 }
  const maybeFail = () => {
    if (state.failNext > 0) {
      state.failNext--
      throw new Error('store down')
    }
  }
  return {
    uses,
    audits,
    appendOptions,
    state,
    async recordPatUse(batch: ReadonlyMap<string, number>) {
      maybeFail()
      uses.push(new Map(batch))
    },
    async appendAudit(events: readonly StoredAuditEvent[], options?: AppendAuditOptions) {
      maybeFail()
      audits.push([...events])
      appendOptions.push(options)
    },
  }
}

function input(n: number, overrides: Partial<AuditEventInput> = {}): AuditEventInput {
  return {
    type: 'auth.failed',
    tenantId: 'acme',
    actor: null,
    outcome: 'invalid_token',
    clientAddress: '192.0.2.1',
    requestId: `req-${n}`,
    details: { n },
    ...overrides,
  }
}

async function sqliteStore(t: TestContext): Promise<SqliteStore> {
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-wb-'))
  const store = openSqliteStore(join(dir, 'tokengate.db'))
  t.after(async () => {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  })
  await store.migrate()
  await store.createTenant({ id: 'acme', name: 'Acme' }, T0)
  return store
}

describe('PAT use recorder', () => {
  it('coalesces uses per token, keeping the latest time, into one write', async () => {
    const store = recordingStore()
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 0 })
    recorder.record('a', T0 + 1)
    recorder.record('a', T0 + 5)
    recorder.record('a', T0 + 3)
    recorder.record('b', T0 + 2)
    assert.equal(recorder.pending(), 2)
    assert.equal(store.uses.length, 0, 'no I/O on record')
    await recorder.flush()
    assert.deepEqual(store.uses, [
      new Map([
        ['a', T0 + 5],
        ['b', T0 + 2],
      ]),
    ])
    assert.equal(recorder.pending(), 0)
    await recorder.flush()
    assert.equal(store.uses.length, 1, 'nothing to write, no write')
  })

  it('with a resolution, a use within it of the last kept one is dropped; a later one kept', async () => {
    const store = recordingStore()
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 0, resolutionMs: 60_000 })
    recorder.record('a', T0)
    recorder.record('a', T0 + 59_999)
    recorder.record('b', T0 + 10)
    await recorder.flush()
    recorder.record('a', T0 + 30_000)
    assert.equal(recorder.pending(), 0, 'within a minute of the kept use: nothing to write')
    recorder.record('a', T0 + 60_000)
    await recorder.flush()
    assert.deepEqual(store.uses, [
      new Map([
        ['a', T0],
        ['b', T0 + 10],
      ]),
      new Map([['a', T0 + 60_000]]),
    ])
  })

  it('the resolution holds for uses far apart and slightly out of order', async () => {
    const store = recordingStore()
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 0, resolutionMs: 60_000 })
    const later = T0 + 30 * 86_400_000
    recorder.record('a', T0)
    recorder.record('a', later)
    recorder.record('a', later + 59_999)
    recorder.record('b', later - 10)
    recorder.record('b', later - 5)
    recorder.record('b', later - 20)
    await recorder.flush()
    assert.deepEqual(store.uses, [
      new Map([
        ['a', later],
        ['b', later - 10],
      ]),
    ])
    recorder.record('a', later + 60_000)
    recorder.record('b', later + 59_990)
    await recorder.flush()
    assert.deepEqual(
      store.uses[1],
      new Map([
        ['b', later + 59_990],
        ['a', later + 60_000],
      ]),
    )
  })

  it('a full table of kept uses starts over only for a new token, not when a kept one is due', async () => {
    // 100,000 tokens (the table's bound, and issue #36's 100,000 in use): each token's use a
    // minute later was kept by clearing the table, so every other token's next use, within its
    // minute, was written again.
    const store = recordingStore()
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 0, resolutionMs: 60_000 })
    const id = (i: number) => `tok_${String(i).padStart(20, '0')}`
    for (let i = 0; i < 99_999; i++) recorder.record(id(i), T0)
    recorder.record(id(99_999), T0 + 50_000)
    await recorder.flush()
    recorder.record(id(0), T0 + 61_000)
    assert.equal(recorder.pending(), 1, 'due: kept')
    await recorder.flush()
    recorder.record(id(99_999), T0 + 62_000)
    recorder.record(id(1), T0 + 59_000)
    assert.equal(recorder.pending(), 0, 'within a minute of their kept uses: nothing to write')
    recorder.record(id(100_000), T0 + 63_000)
    recorder.record(id(99_999), T0 + 64_000)
    assert.deepEqual(
      [...((await recorder.flush().then(() => store.uses.at(-1))) ?? [])].map(([key]) => key),
      [id(100_000), id(99_999)],
      'a new token beyond the bound starts over: one more use kept per token, at worst',
    )
  })

  it('uses the clock when no time is given', async () => {
    const store = recordingStore()
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 0, clock: { now: () => 77 } })
    recorder.record('a')
    await recorder.flush()
    assert.deepEqual(store.uses, [new Map([['a', 77]])])
  })

  it('a failed flush keeps the uses, merged with newer ones, for the next flush', async () => {
    const store = recordingStore()
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 0 })
    recorder.record('a', T0 + 10)
    recorder.record('b', T0 + 10)
    store.state.failNext = 1
    await assert.rejects(recorder.flush(), /store down/)
    recorder.record('a', T0 + 20)
    recorder.record('b', T0 + 5)
    recorder.record('c', T0 + 1)
    await recorder.flush()
    assert.deepEqual(store.uses, [
      new Map([
        ['a', T0 + 20],
        ['b', T0 + 10],
        ['c', T0 + 1],
      ]),
    ])
  })

  it('the timer flushes every interval and reports failures without throwing', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] })
    const store = recordingStore()
    const errors: unknown[] = []
    const recorder = createPatUseRecorder(store, {
      flushIntervalMs: 1000,
      onError: (e) => errors.push(e),
    })
    recorder.record('a', T0)
    t.mock.timers.tick(999)
    await settle()
    assert.equal(store.uses.length, 0)
    t.mock.timers.tick(1)
    await settle()
    assert.equal(store.uses.length, 1)

    recorder.record('b', T0)
    store.state.failNext = 1
    t.mock.timers.tick(1000)
    await settle()
    assert.equal(errors.length, 1)
    assert.equal(recorder.pending(), 1)
    t.mock.timers.tick(1000)
    await settle()
    assert.deepEqual(store.uses[1], new Map([['b', T0]]))
    await recorder.close()
  })

  it('close flushes and stops the timer', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] })
    const store = recordingStore()
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 1000 })
    recorder.record('a', T0)
    await recorder.close()
    assert.deepEqual(store.uses, [new Map([['a', T0]])])
    recorder.record('b', T0)
    t.mock.timers.tick(5000)
    await settle()
    assert.equal(store.uses.length, 1, 'no timer after close')
    await recorder.flush()
    assert.equal(store.uses.length, 2, 'an explicit flush still writes')
  })

  it('writes last-used times to a real SQLite store on close', async (t) => {
    const store = await sqliteStore(t)
    const hash = createHash('sha256').update('pat_x').digest('hex')
    await store.insertPat({
      id: 'p1',
      tokenHash: hash,
      tenantId: 'acme',
      subject: 's',
      name: 'n',
      permissions: [],
      last4: 'abcd',
      createdAt: T0,
      expiresAt: null,
      revokedAt: null,
      lastUsedAt: T0 + 100,
      rotatedFrom: null,
    })
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 0 })
    recorder.record('p1', T0 + 50)
    recorder.record('ghost', T0 + 50)
    await recorder.flush()
    assert.equal((await store.getPat('p1'))?.lastUsedAt, T0 + 100, 'never moves back')
    recorder.record('p1', T0 + 500)
    await recorder.close()
    assert.equal((await store.getPat('p1'))?.lastUsedAt, T0 + 500)
  })
})

describe('audit writer', () => {
  it('assigns a unique id and the clock time, keeping given ones', async () => {
    const store = recordingStore()
    const writer = createAuditWriter(store, { flushIntervalMs: 0, clock: { now: () => 42 } })
    writer.write(input(1))
    writer.write(input(2))
    writer.write(input(3, { id: 'given', time: 7 }))
    await writer.flush()
    const [batch] = store.audits
    assert.equal(batch?.length, 3)
    const [a, b, c] = batch ?? []
    assert.equal(a?.time, 42)
    assert.match(a?.id ?? '', /^[0-9a-f-]{36}$/)
    assert.notEqual(a?.id, b?.id)
    assert.deepEqual(c, { ...input(3), id: 'given', time: 7 })
  })

  it('queues for delivery by default; queueForDelivery: false says so on every append', async () => {
    const queued = recordingStore()
    const writer = createAuditWriter(queued, { flushIntervalMs: 0, maxBatch: 2 })
    for (let i = 0; i < 3; i++) writer.write(input(i))
    await writer.flush()
    assert.deepEqual(queued.appendOptions, [{ queue: true }, { queue: true }])

    const stored = recordingStore()
    const storeOnly = createAuditWriter(stored, {
      flushIntervalMs: 0,
      maxBatch: 2,
      maxQueue: 3,
      queueForDelivery: false,
    })
    for (let i = 0; i < 4; i++) storeOnly.write(input(i))
    await storeOnly.flush()
    // Two batches, then the audit.dropped event for the one refused: none queued.
    assert.deepEqual(
      stored.audits.map((batch) => batch.map((e) => e.type)),
      [['auth.failed', 'auth.failed'], ['auth.failed'], ['audit.dropped']],
    )
    assert.deepEqual(stored.appendOptions, [{ queue: false }, { queue: false }, { queue: false }])
  })

  it('writes in order, in batches of at most maxBatch', async () => {
    const store = recordingStore()
    const writer = createAuditWriter(store, { flushIntervalMs: 0, maxBatch: 3 })
    for (let i = 0; i < 7; i++) writer.write(input(i))
    await writer.flush()
    assert.deepEqual(
      store.audits.map((batch) => batch.map((e) => e.details.n)),
      [[0, 1, 2], [3, 4, 5], [6]],
    )
    assert.deepEqual(writer.stats(), { queued: 0, dropped: 0 })
  })

  it('a full batch starts a flush without waiting for the timer', async () => {
    const store = recordingStore()
    const writer = createAuditWriter(store, { flushIntervalMs: 0, maxBatch: 3 })
    writer.write(input(0))
    writer.write(input(1))
    await settle()
    assert.equal(store.audits.length, 0)
    writer.write(input(2))
    await settle()
    assert.equal(store.audits.length, 1)
    assert.equal(store.audits[0]?.length, 3)
  })

  it('a flush writes what was queued when it began; events written meanwhile wait for the next', async () => {
    // A store whose commit takes a while (a writer thread, a network round trip): a steady
    // stream must not turn one flush into a commit per round trip.
    const store = recordingStore()
    // Each commit is held open until the test lets it go (a timer here raced settle() on a
    // loaded machine: the commit could end before the check below).
    let inFlight = 0
    let commit = () => {}
    const slow = {
      async appendAudit(events: readonly StoredAuditEvent[], options?: AppendAuditOptions) {
        inFlight++
        await new Promise<void>((resolve) => {
          commit = resolve
        })
        inFlight--
        return store.appendAudit(events, options)
      },
    }
    const writer = createAuditWriter(slow, { flushIntervalMs: 0 })
    writer.write(input(0))
    writer.write(input(1))
    const flushed = writer.flush()
    await settle()
    assert.equal(inFlight, 1)
    writer.write(input(2))
    await settle()
    assert.equal(inFlight, 1, 'the event written meanwhile starts no second commit')
    commit()
    await flushed
    assert.deepEqual(
      store.audits.map((batch) => batch.map((e) => e.details.n)),
      [[0, 1]],
    )
    assert.equal(writer.stats().queued, 1)
    const second = writer.flush()
    await settle()
    commit()
    await second
    assert.deepEqual(
      store.audits.map((batch) => batch.map((e) => e.details.n)),
      [[0, 1], [2]],
    )
  })

  it('a failed flush loses nothing: the next one writes everything, in order', async () => {
    const store = recordingStore()
    const errors: unknown[] = []
    const writer = createAuditWriter(store, {
      flushIntervalMs: 0,
      maxBatch: 2,
      onError: (e) => errors.push(e),
    })
    store.state.failNext = 2
    // The second write fills a batch and starts a flush, which fails in the background.
    for (let i = 0; i < 3; i++) writer.write(input(i))
    await assert.rejects(writer.flush(), /store down/)
    assert.equal(errors.length, 1)
    assert.equal(writer.stats().queued, 3)
    writer.write(input(3))
    await writer.flush()
    assert.deepEqual(
      store.audits.flat().map((e) => e.details.n),
      [0, 1, 2, 3],
    )
  })

  it('concurrent flushes run one after the other and write each event once', async () => {
    const store = recordingStore()
    const writer = createAuditWriter(store, { flushIntervalMs: 0, maxBatch: 2 })
    for (let i = 0; i < 5; i++) writer.write(input(i))
    await Promise.all([writer.flush(), writer.flush(), writer.flush()])
    assert.deepEqual(
      store.audits.flat().map((e) => e.details.n),
      [0, 1, 2, 3, 4],
    )
  })

  it('beyond maxQueue new events are counted as dropped, then the gap is audited', async () => {
    const store = recordingStore()
    const writer = createAuditWriter(store, {
      flushIntervalMs: 0,
      maxQueue: 2,
      clock: { now: () => 99 },
    })
    store.state.failNext = 1
    for (let i = 0; i < 5; i++) writer.write(input(i))
    assert.deepEqual(writer.stats(), { queued: 2, dropped: 3 })
    await assert.rejects(writer.flush())
    await writer.flush()
    const written = store.audits.flat()
    assert.deepEqual(
      written.slice(0, 2).map((e) => e.details.n),
      [0, 1],
    )
    assert.equal(written[2]?.type, 'audit.dropped')
    assert.deepEqual(written[2]?.details, { count: 3 })
    assert.equal(written[2]?.time, 99)
    assert.equal(written.length, 3)
    await writer.flush()
    assert.equal(store.audits.flat().length, 3, 'the gap is reported once')
    assert.deepEqual(writer.stats(), { queued: 0, dropped: 3 })
  })

  it('the timer flushes; close flushes and stops it', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] })
    const store = recordingStore()
    const writer = createAuditWriter(store, { flushIntervalMs: 200 })
    writer.write(input(0))
    t.mock.timers.tick(200)
    await settle()
    assert.equal(store.audits.length, 1)
    writer.write(input(1))
    await writer.close()
    assert.equal(store.audits.length, 2)
    writer.write(input(2))
    t.mock.timers.tick(1000)
    await settle()
    assert.equal(store.audits.length, 2, 'no timer after close')
  })

  it('a retry after a commit reported as failed does not duplicate (real SQLite)', async (t) => {
    const store = await sqliteStore(t)
    let lostReplies = 1
    // The write commits, but its success never reaches the writer (a dropped connection).
    const flaky = {
      async appendAudit(events: readonly StoredAuditEvent[]) {
        await store.appendAudit(events)
        if (lostReplies-- > 0) throw new Error('connection reset')
      },
    }
    const writer = createAuditWriter(flaky, { flushIntervalMs: 0 })
    for (let i = 0; i < 3; i++) writer.write(input(i, { time: T0 + i }))
    await assert.rejects(writer.flush(), /connection reset/)
    await writer.close()
    const page = await store.listAudit('acme', { limit: 10 })
    assert.deepEqual(
      page.items.map((e) => e.details.n),
      [2, 1, 0],
    )
  })

  it('rejects invalid options', () => {
    const store = recordingStore()
    assert.throws(() => createAuditWriter(store, { maxBatch: 0 }), RangeError)
    assert.throws(() => createAuditWriter(store, { maxQueue: -1 }), RangeError)
    assert.throws(() => createAuditWriter(store, { flushIntervalMs: -5 }), RangeError)
    assert.throws(() => createPatUseRecorder(store, { flushIntervalMs: Number.NaN }), RangeError)
  })
})

describe('flush timers while idle', () => {
  /** Fake timers, and a count of the timers the writers arm (either kind). */
  const armedTimers = (t: TestContext) => {
    t.mock.timers.enable({ apis: ['setTimeout', 'setInterval'] })
    const timeouts = t.mock.method(globalThis, 'setTimeout')
    const intervals = t.mock.method(globalThis, 'setInterval')
    return () => timeouts.mock.callCount() + intervals.mock.callCount()
  }

  it('a PAT use recorder arms a timer only once something is recorded, and none after its flush', async (t) => {
    const armed = armedTimers(t)
    const store = recordingStore()
    const recorder = createPatUseRecorder(store, { flushIntervalMs: 1000 })
    assert.equal(armed(), 0, 'nothing recorded: no timer')
    recorder.record('a', T0)
    recorder.record('b', T0)
    assert.equal(armed(), 1, 'one timer for the uses of an interval')
    t.mock.timers.tick(1000)
    await settle()
    assert.deepEqual(store.uses, [
      new Map([
        ['a', T0],
        ['b', T0],
      ]),
    ])
    t.mock.timers.tick(10_000)
    await settle()
    assert.equal(armed(), 1, 'nothing left to write: not armed again')
    recorder.record('c', T0)
    t.mock.timers.tick(1000)
    await settle()
    assert.equal(store.uses.length, 2)
    await recorder.close()
  })

  it('an audit writer re-arms after a failed flush and for events written while one runs', async (t) => {
    const armed = armedTimers(t)
    const store = recordingStore()
    let release = () => {}
    let holding = false
    const slow = {
      async appendAudit(events: readonly StoredAuditEvent[]) {
        if (holding) await new Promise<void>((resolve) => (release = resolve))
        await store.appendAudit(events)
      },
    }
    const writer = createAuditWriter(slow, { flushIntervalMs: 200 })
    assert.equal(armed(), 0, 'nothing written: no timer')
    writer.write(input(0))
    store.state.failNext = 1
    t.mock.timers.tick(200)
    await settle()
    assert.equal(writer.stats().queued, 1, 'the failed event is kept')
    t.mock.timers.tick(200)
    await settle()
    assert.equal(store.audits.flat().length, 1, 'retried by the timer, with no new write')

    holding = true
    writer.write(input(1))
    t.mock.timers.tick(200)
    await settle()
    writer.write(input(2)) // while the flush of input(1) waits on the store
    holding = false
    t.mock.timers.tick(200) // that flush still runs: looked at again one interval later
    await settle()
    release()
    await settle()
    t.mock.timers.tick(200)
    await settle()
    assert.deepEqual(
      store.audits.flat().map((event) => event.requestId),
      ['req-0', 'req-1', 'req-2'],
    )
    const after = armed()
    t.mock.timers.tick(10_000)
    await settle()
    assert.equal(armed(), after, 'all written: not armed again')
    await writer.close()
  })
})
