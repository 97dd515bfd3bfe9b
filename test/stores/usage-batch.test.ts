import assert from 'node:assert/strict'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { USAGE_COLUMNS } from '../../src/stores/rows.ts'
import { batchParam } from '../../src/stores/sql/db.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import type { UsageRow } from '../../src/stores/store.ts'
import { encodeUsage, usageRows } from '../../src/stores/usage-batch.ts'
import { MinuteCounts } from '../../src/stores/usage-counts.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const FIELDS: Record<string, keyof UsageRow> = {
  scope: 'scope',
  subject: 'subject',
  resolution: 'resolution',
  bucket_start: 'bucketStart',
  tenant_id: 'tenantId',
  allowed: 'allowed',
  unauthorized: 'unauthorized',
  forbidden: 'forbidden',
  limited: 'limited',
}

/** What the statement reads, encoded the plain way: JSON of each row's values in column order. */
const reference = (rows: readonly UsageRow[]) =>
  batchParam(
    rows.map((row) =>
      USAGE_COLUMNS.split(', ').map((column) => row[FIELDS[column] as keyof UsageRow]),
    ),
  )

const row = (subject: string, tenantId: string | null, counts: number[]): UsageRow => ({
  scope: tenantId === null ? 'tenant' : 'key',
  subject,
  resolution: 'hour',
  bucketStart: Date.UTC(2026, 10, 28, 12),
  tenantId,
  allowed: counts[0] as number,
  unauthorized: counts[1] as number,
  forbidden: counts[2] as number,
  limited: counts[3] as number,
})

const START = Date.UTC(2026, 10, 28, 12, 3)

describe('usage batches: rows encoded as addUsage reads them', () => {
  it('is the JSON of the values in column order, for any id and any count', () => {
    const rows: UsageRow[] = [
      { ...row('', null, [0, 0, 0, 0]), scope: 'all', resolution: 'minute' },
      row('acme', null, [1, 22, 333, 4444]),
      row('tok_0123456789abcdefghijKL', 'acme', [2147483647, -2147483648, -1, 10]),
      row('quote"', 'tab\there', [1, 0, 0, 0]),
      row('back\\slash', 'acme', [1, 0, 0, 0]),
      row('ctrl\u0000\u001f\u007f', 'ü-€-𝄞', [0, 1, 0, 0]),
      row('lone\ud800surrogate', 'x'.repeat(300), [0, 0, 1, 0]),
      { ...row('day', 'acme', [0, 0, 0, 1]), resolution: 'day', bucketStart: 0 },
    ]
    assert.equal(encodeUsage(rows).text, reference(rows))
    assert.equal(encodeUsage(rows).rows, rows.length)
    assert.deepEqual(usageRows(encodeUsage(rows)), rows)
    assert.equal(encodeUsage([]).text, '[]')
  })

  it('a batch far larger than the encoder buffer, then a small one (the buffer is reused)', () => {
    const many = Array.from({ length: 5_000 }, (_, i) =>
      row(`tok_${String(i).padStart(20, '0')}`, `tenant-${i % 13}`, [i, i * 7, 0, i % 3]),
    )
    assert.equal(encodeUsage(many).text, reference(many))
    const few = many.slice(0, 2)
    assert.equal(encodeUsage(few).text, reference(few))
  })

  it('a minute slice from the typed arrays equals the rows it holds, encoded the plain way', () => {
    const counts = new MinuteCounts(START, 1_000)
    for (let i = 0; i < 500; i++) {
      counts.add('allowed', `t${i % 7}`, `tok_${i}`, 1)
      if (i % 5 === 0) counts.add('limited', `t${i % 7}`, `tok_${i}`, 1)
      if (i % 11 === 0) counts.add('allowed', `t${i % 7}`, `tok_${i}`, -1)
    }
    counts.add('unauthorized', null, null, 1)
    counts.add('allowed', 'wide-€', 'ü'.repeat(40), 1)
    for (const [from, count] of [
      [0, counts.subjects],
      [0, 3],
      [5, 64],
      [counts.subjects - 2, 10],
    ] as const) {
      const batch = counts.rows(from, count)
      const rows = usageRows(batch)
      assert.equal(batch.rows, Math.min(count, counts.subjects - from) * 3)
      assert.equal(batch.text, reference(rows))
    }
    const [total, , , tenant] = usageRows(counts.rows(0, 2))
    assert.deepEqual(
      [total?.scope, total?.allowed, total?.unauthorized, total?.limited, tenant?.subject],
      ['all', 500 - 46 + 1, 1, 100, 't0'],
    )
  })

  it('SQLite stores an encoded slice as it stores the same rows given as objects', async () => {
    const dir = tempDir('tg-usage-batch-')
    const counts = new MinuteCounts(START, 100)
    counts.add('allowed', 'acme', 'k1', 1)
    counts.add('forbidden', 'acme', 'k2', 1)
    counts.add('allowed', 'acme', 'k1', 1)
    const read = async (rows: Parameters<ReturnType<typeof openSqliteStore>['addUsage']>[0]) => {
      const store = openSqliteStore(join(dir, `${Math.random()}.sqlite`))
      await store.migrate()
      await store.addUsage(rows)
      const found = []
      for (const resolution of ['minute', 'hour', 'day'] as const) {
        for (const [scope, subject] of [
          ['all', ''],
          ['tenant', 'acme'],
          ['key', 'k1'],
          ['key', 'k2'],
        ] as const) {
          found.push(
            ...(await store.readUsage({ scope, subject, resolution, since: 0, until: START * 2 })),
          )
        }
      }
      await store.close()
      return found
    }
    const encoded = await read(counts.rows(0, counts.subjects))
    assert.equal(encoded.length, 12)
    assert.deepEqual(encoded, await read([...usageRows(counts.rows(0, counts.subjects))]))
    assert.deepEqual(
      encoded.filter((r) => r.resolution === 'day').map((r) => [r.subject, r.allowed, r.forbidden]),
      [
        ['', 2, 1],
        ['acme', 2, 1],
        ['k1', 2, 0],
        ['k2', 0, 1],
      ],
    )
  })
})
