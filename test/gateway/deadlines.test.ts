/**
 * The gateway's one timer for every exchange's deadline (src/gateway/deadlines.ts): each
 * entry expires once, no earlier than its timeout, in arrival order; a removed entry never
 * expires; callbacks may add and remove entries.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { type DeadlineEntry, Deadlines } from '../../src/gateway/deadlines.ts'

interface Probe extends DeadlineEntry {
  readonly name: string
  expiredAt: number | undefined
}

function probe(name: string, expired: string[], onExpire?: () => void): Probe {
  const entry: Probe = {
    name,
    expiredAt: undefined,
    deadlineAt: 0,
    deadlinePrevious: null,
    deadlineNext: null,
    deadlineQueued: false,
    onDeadline() {
      entry.expiredAt = performance.now()
      expired.push(name)
      onExpire?.()
    },
  }
  return entry
}

test('entries expire once each, in arrival order, no earlier than the timeout', async () => {
  const deadlines = new Deadlines(40)
  const expired: string[] = []
  const addedAt = new Map<string, number>()
  const entries: Probe[] = []
  for (const name of ['a', 'b', 'c']) {
    const entry = probe(name, expired)
    addedAt.set(name, performance.now())
    deadlines.add(entry)
    entries.push(entry)
    await sleep(10)
  }
  assert.equal(deadlines.size, 3)
  await sleep(150)
  assert.deepEqual(expired, ['a', 'b', 'c'])
  for (const entry of entries) {
    const waited = (entry.expiredAt ?? 0) - (addedAt.get(entry.name) ?? 0)
    assert.ok(waited >= 39, `${entry.name} expired after ${waited} ms`)
    assert.equal(entry.deadlineQueued, false)
  }
  assert.equal(deadlines.size, 0)
})

test('a removed entry never expires, wherever it was in the list', async () => {
  const deadlines = new Deadlines(30)
  const expired: string[] = []
  const [first, middle, last, only] = ['first', 'middle', 'last', 'kept'].map((n) =>
    probe(n, expired),
  ) as [Probe, Probe, Probe, Probe]
  deadlines.add(first)
  deadlines.add(middle)
  deadlines.add(only)
  deadlines.add(last)
  deadlines.remove(middle)
  deadlines.remove(first)
  deadlines.remove(last)
  deadlines.remove(last) // twice: harmless
  assert.equal(deadlines.size, 1)
  await sleep(100)
  assert.deepEqual(expired, ['kept'])
  assert.equal(deadlines.size, 0)
})

test('entries added after the list emptied still expire (the timer is re-armed)', async () => {
  const deadlines = new Deadlines(20)
  const expired: string[] = []
  const early = probe('early', expired)
  deadlines.add(early)
  deadlines.remove(early)
  // The timer armed for `early` is still due; these come later and must not be lost.
  await sleep(5)
  deadlines.add(probe('one', expired))
  await sleep(40)
  deadlines.add(probe('two', expired))
  await sleep(80)
  assert.deepEqual(expired, ['one', 'two'])
})

test('a callback may add and remove entries, its own list included', async () => {
  const deadlines = new Deadlines(20)
  const expired: string[] = []
  const victim = probe('victim', expired)
  const again = probe('again', expired)
  const first = probe('first', expired, () => {
    deadlines.remove(victim)
    deadlines.add(again)
  })
  deadlines.add(first)
  deadlines.add(victim)
  await sleep(120)
  assert.deepEqual(expired, ['first', 'again'])
})

test('re-adding an entry moves its deadline to now + timeout', async () => {
  let now = 0
  const deadlines = new Deadlines(1_000, () => now)
  const expired: string[] = []
  const a = probe('a', expired)
  const b = probe('b', expired)
  deadlines.add(a)
  deadlines.add(b)
  now = 500
  deadlines.add(a)
  assert.equal(a.deadlineAt, 1_500)
  assert.equal(b.deadlineAt, 1_000)
  assert.equal(deadlines.size, 2)
  deadlines.clear()
  assert.equal(deadlines.size, 0)
  assert.equal(a.deadlineQueued, false)
})

test('a bad timeout is refused', () => {
  assert.throws(() => new Deadlines(0), RangeError)
  assert.throws(() => new Deadlines(Number.NaN), RangeError)
})

test('the timer does not keep the process alive: a process with a 60 s deadline pending exits', async () => {
  const module = new URL('../../src/gateway/deadlines.ts', import.meta.url).href
  const script = `
    const { Deadlines } = await import(${JSON.stringify(module)})
    const entry = { deadlineAt: 0, deadlinePrevious: null, deadlineNext: null, deadlineQueued: false, onDeadline() { console.log('expired') } }
    new Deadlines(60_000).add(entry)
    console.log('added')
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  const killer = setTimeout(() => child.kill('SIGKILL'), 20_000)
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null]
  clearTimeout(killer)
  assert.equal(signal, null, 'still running after 20 s: the deadline timer holds the process')
  assert.equal(code, 0)
  assert.equal(output.trim(), 'added')
})
