/**
 * The system clock read once per gated request (core/request-clock.ts): `RequestClock` on its
 * own, and `createTokengate`'s gate deciding a cached PAT on one reading of `Date.now()`
 * (lookup cache, PAT checks, limiter, last-used time, usage count), with the clock live again
 * once `check` answers or waits, and a caller's own clock left unwrapped.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { GateRequest, Outcome } from '../../src/auth/outcome.ts'
import { createTokengate, type Tokengate } from '../../src/auth/tokengate.ts'
import { RequestClock } from '../../src/core/request-clock.ts'
import { isPromiseLike, type MaybePromise } from '../../src/lib/maybe-async.ts'
import { tempDir } from '../helpers/temp-dir.ts'

describe('RequestClock', () => {
  test('unpinned it reads Date.now() each time; pinned, the one reading until released', (t) => {
    let time = 1_000
    t.mock.method(Date, 'now', () => time++)
    const clock = new RequestClock()
    assert.equal(clock.now(), 1_000)
    assert.equal(clock.now(), 1_001)
    assert.equal(clock.pin(), true)
    assert.deepEqual([clock.now(), clock.now(), clock.now()], [1_002, 1_002, 1_002])
    clock.release()
    assert.equal(clock.now(), 1_003)
  })

  test('a nested pin keeps the outer reading and does not own the release', (t) => {
    let time = 5_000
    t.mock.method(Date, 'now', () => time++)
    const clock = new RequestClock()
    assert.equal(clock.pin(), true)
    assert.equal(clock.pin(), false)
    assert.equal(clock.now(), 5_000)
    clock.release()
    assert.equal(clock.now(), 5_001)
  })

  test('`now` works detached (handed on as a function)', (t) => {
    t.mock.method(Date, 'now', () => 42)
    const { now } = new RequestClock()
    assert.equal(now(), 42)
  })
})

async function gateWithPat(
  options: { clock?: { now(): number } } = {},
): Promise<{ gate: Tokengate; request: GateRequest; expiresAt: number }> {
  const dataDir = tempDir('tokengate-request-clock-')
  const gate = await createTokengate({ dataDir, ...options })
  await gate.store.createTenant({ id: 'acme', name: 'Acme' }, Date.now())
  const { token, record } = await gate.pats.issue({
    tenantId: 'acme',
    subject: 'svc',
    name: 'clock',
    permissions: ['things:read'],
    lifetime: 3_600_000,
    quota: { limit: 1_000 },
  })
  const request: GateRequest = {
    method: 'GET',
    target: '/things',
    authorization: [`Bearer ${token}`],
    tenantIds: [],
    clientAddress: '127.0.0.1',
    requestId: 'req-1',
    access: { permissions: ['things:read'] },
  }
  return { gate, request, expiresAt: record.expiresAt as number }
}

/** The outcome of a check that must have answered without waiting. */
function answered(outcome: MaybePromise<Outcome>): Outcome {
  assert.ok(!isPromiseLike(outcome), 'decided synchronously (a cached key)')
  return outcome
}

describe("createTokengate's gate reads the system clock once per request", () => {
  test('a cached PAT is decided on one Date.now() reading, limits, quota, last-used and usage included', async (t) => {
    const { gate, request } = await gateWithPat()
    try {
      // The first check looks the key up in the store (a promise); the next are cache hits.
      const first = await gate.check(request)
      assert.equal(first.allowed, true)
      const real = Date.now
      let reads = 0
      t.mock.method(Date, 'now', () => {
        reads++
        return real()
      })
      const outcome = answered(gate.check(request))
      assert.equal(outcome.allowed, true)
      assert.equal(outcome.allowed && outcome.headers['ratelimit-policy'] !== undefined, true)
      assert.equal(reads, 1)
    } finally {
      await gate.close()
    }
  })

  test('the clock is live again once check answers, and after a step waits', async (t) => {
    const { gate, request, expiresAt } = await gateWithPat()
    try {
      let time = expiresAt - 1_000
      t.mock.method(Date, 'now', () => time)
      assert.equal((await gate.check(request)).allowed, true)
      // A synchronous check (a cached key) lets go of its reading when it answers: the next
      // request reads the clock again (the key expired in between).
      const cached = answered(gate.check(request))
      assert.equal(cached.allowed, true)
      time = expiresAt + 1_000
      const next = await gate.check(request)
      assert.equal(!next.allowed && next.failure.code, 'token_expired')

      // A check that waits for the store's lookup: the steps after it read the time then,
      // not the time pinned when the request came in.
      time = expiresAt - 1_000
      const other = await gate.pats.issue({
        tenantId: 'acme',
        subject: 'svc',
        name: 'clock-2',
        permissions: ['things:read'],
        lifetime: 1_000,
      })
      const waiting = gate.check({ ...request, authorization: [`Bearer ${other.token}`] })
      assert.ok(waiting instanceof Promise, 'a key not cached yet is looked up in the store')
      time = expiresAt + 1_000
      const late = await waiting
      assert.equal(!late.allowed && late.failure.code, 'token_expired')
    } finally {
      await gate.close()
    }
  })

  test("a caller's own clock is not pinned: each part reads it, as before", async () => {
    let reads = 0
    const clock = {
      now: () => {
        reads++
        return Date.now()
      },
    }
    const { gate, request } = await gateWithPat({ clock })
    try {
      await gate.check(request)
      reads = 0
      answered(gate.check(request))
      assert.ok(reads > 1, `the caller's clock read ${reads} times`)
    } finally {
      await gate.close()
    }
  })
})
