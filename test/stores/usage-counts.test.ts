import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { UsageRow } from '../../src/stores/store.ts'
import { usageRows } from '../../src/stores/usage-batch.ts'
import { MinuteCounts } from '../../src/stores/usage-counts.ts'

const START = Date.UTC(2026, 2, 10, 9, 59)

/** Minute rows as [scope, subject, tenant, allowed, unauthorized, forbidden, limited]. */
const minuteRows = (rows: readonly UsageRow[]) =>
  rows
    .filter((r) => r.resolution === 'minute')
    .map((r) => [r.scope, r.subject, r.tenantId, r.allowed, r.unauthorized, r.forbidden, r.limited])

describe('MinuteCounts: one minute of usage counts in typed arrays', () => {
  it('counts the total, tenants and keys; rows in write order, each bucket once', () => {
    const counts = new MinuteCounts(START, 100)
    counts.add('allowed', 'acme', 'k1', 1)
    counts.add('allowed', 'acme', 'k1', 1)
    counts.add('forbidden', 'acme', 'k2', 1)
    counts.add('limited', 'beta', 'k3', 1)
    counts.add('allowed', 'acme', null, 1)
    counts.add('unauthorized', null, null, 1)
    counts.add('allowed', 'acme', 'k1', -1)
    assert.equal(counts.subjects, 6)
    const rows = usageRows(counts.rows(0, counts.subjects))
    assert.equal(rows.length, 18, 'minute, hour and day per subject')
    assert.deepEqual(minuteRows(rows), [
      ['all', '', null, 2, 1, 1, 1],
      ['tenant', 'acme', null, 2, 0, 1, 0],
      ['tenant', 'beta', null, 0, 0, 0, 1],
      ['key', 'k1', 'acme', 1, 0, 0, 0],
      ['key', 'k2', 'acme', 0, 0, 1, 0],
      ['key', 'k3', 'beta', 0, 0, 0, 1],
    ])
    assert.deepEqual(
      rows.slice(0, 3).map((r) => [r.resolution, new Date(r.bucketStart).toISOString()]),
      [
        ['minute', '2026-03-10T09:59:00.000Z'],
        ['hour', '2026-03-10T09:00:00.000Z'],
        ['day', '2026-03-10T00:00:00.000Z'],
      ],
    )
  })

  it('rows come a slice at a time, and the slices cover every subject once', () => {
    const counts = new MinuteCounts(START, 1_000)
    for (let i = 0; i < 300; i++) counts.add('allowed', `t${i % 7}`, `key-${i}`, 1)
    const seen: string[] = []
    for (let from = 0; from < counts.subjects; from += 64) {
      for (const row of usageRows(counts.rows(from, 64))) {
        if (row.resolution === 'minute') seen.push(`${row.scope}:${row.subject}`)
      }
    }
    assert.equal(seen.length, 1 + 7 + 300)
    assert.equal(new Set(seen).size, seen.length)
    assert.deepEqual(usageRows(counts.rows(counts.subjects, 10)), [])
  })

  it('any id works: long and non-Latin-1 ids are held aside, with their tenant', () => {
    const counts = new MinuteCounts(START, 10)
    const long = `jwt-subject-${'x'.repeat(200)}`
    counts.add('allowed', 'tenant-ü-€', long, 1)
    counts.add('allowed', 'tenant-ü-€', long, 1)
    assert.deepEqual(minuteRows(usageRows(counts.rows(0, 10))).slice(1), [
      ['tenant', 'tenant-ü-€', null, 2, 0, 0, 0],
      ['key', long, 'tenant-ü-€', 2, 0, 0, 0],
    ])
  })

  it('beyond maxSubjects tenants and keys count in the total only, as overflow', () => {
    const counts = new MinuteCounts(START, 3)
    counts.add('allowed', 't1', 'k1', 1) // 2 subjects
    counts.add('allowed', 't1', 'k2', 1) // 3
    counts.add('allowed', 't2', 'k3', 1) // both over
    counts.add('allowed', 't1', 'k1', 1) // known: still counted
    assert.equal(counts.overflow, 2)
    assert.deepEqual(minuteRows(usageRows(counts.rows(0, 10))), [
      ['all', '', null, 4, 0, 0, 0],
      ['tenant', 't1', null, 3, 0, 0, 0],
      ['key', 'k1', 't1', 2, 0, 0, 0],
      ['key', 'k2', 't1', 1, 0, 0, 0],
    ])
  })

  it('merge adds the subjects from the skip-th on (a flush put back what it did not store)', () => {
    const failed = new MinuteCounts(START, 100)
    failed.add('allowed', 't', 'k1', 1)
    failed.add('forbidden', 't', 'k2', 1)
    failed.add('allowed', 't', 'k3', 1)
    // Stored: the total, the tenant and k1 (three subjects).
    const pending = new MinuteCounts(START, 100)
    pending.add('allowed', 't', 'k3', 1)
    pending.merge(failed, 3)
    assert.deepEqual(minuteRows(usageRows(pending.rows(0, 10))), [
      ['all', '', null, 1, 0, 0, 0],
      ['tenant', 't', null, 1, 0, 0, 0],
      ['key', 'k3', 't', 2, 0, 0, 0],
      ['key', 'k2', 't', 0, 0, 1, 0],
    ])
    const all = new MinuteCounts(START, 100)
    all.merge(failed, 0)
    assert.deepEqual(
      minuteRows(usageRows(all.rows(0, 10))),
      minuteRows(usageRows(failed.rows(0, 10))),
    )
  })
})
