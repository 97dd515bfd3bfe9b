import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createUpstreamAdmission } from '../../src/gateway/admission.ts'

describe('upstream admission', () => {
  test('caps per token and per tenant, hands a freed connection to the next waiter', async () => {
    const admission = createUpstreamAdmission({
      connections: 2,
      perTenant: 2,
      perToken: 1,
      waitMs: 5_000,
    })
    const a = await admission.admit('t1', 'k1')
    assert.equal(a.ok, true)
    assert.deepEqual(await admission.admit('t1', 'k1'), { ok: false, reason: 'token' })
    const b = await admission.admit('t1', 'k2')
    assert.equal(b.ok, true)
    assert.deepEqual(await admission.admit('t1', 'k3'), { ok: false, reason: 'tenant' })
    // The pool (2) is full: another tenant waits, and gets the connection a release frees.
    const waiting = admission.admit('t2', 'k4')
    assert.ok(waiting instanceof Promise)
    if (a.ok) {
      a.release()
      a.release() // twice is once
    }
    const c = await waiting
    assert.equal(c.ok, true)
    // t1/k1 is free again, but the pool is full (b and c): it has to wait.
    const next = admission.admit('t1', 'k1')
    assert.ok(next instanceof Promise)
    if (b.ok) b.release()
    assert.equal((await next).ok, true)
  })

  test('a wait longer than waitMs is refused as busy and frees its caps', async () => {
    const admission = createUpstreamAdmission({
      connections: 1,
      perTenant: 1,
      perToken: 1,
      waitMs: 20,
    })
    assert.equal((await admission.admit('t1', 'k1')).ok, true)
    assert.deepEqual(await admission.admit('t2', 'k2'), { ok: false, reason: 'busy' })
    assert.deepEqual(await admission.admit('t2', 'k2'), { ok: false, reason: 'busy' })
  })
})

test('counts survive the sweep of idle keys: a token in flight among thousands that came and went keeps its cap', async () => {
  const admission = createUpstreamAdmission({
    connections: 10_000,
    perTenant: 10_000,
    perToken: 1,
    waitMs: 5_000,
  })
  const held = await admission.admit('t1', 'held')
  assert.equal(held.ok, true)
  // Enough distinct keys, each admitted and released, to pass the sweep bound several times.
  for (let i = 0; i < 5_000; i++) {
    const ticket = await admission.admit(`tenant-${i}`, `key-${i}`)
    assert.equal(ticket.ok, true)
    if (ticket.ok) ticket.release()
  }
  assert.deepEqual(await admission.admit('t1', 'held'), { ok: false, reason: 'token' })
  // An idle key swept away starts from zero again.
  const again = await admission.admit('tenant-7', 'key-7')
  assert.equal(again.ok, true)
  assert.deepEqual(await admission.admit('tenant-7', 'key-7'), { ok: false, reason: 'token' })
  if (held.ok) held.release()
  assert.equal((await admission.admit('t1', 'held')).ok, true)
})
