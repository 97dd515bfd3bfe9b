/**
 * auth/edge-headers.ts: the edge's one pass over raw headers reads what core/raw-headers.ts
 * reads (every Authorization and X-Tenant-Id, any ASCII case, duplicates kept, look-alike
 * names ignored) plus the first X-Request-Id and Content-Type.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { readEdgeHeaders } from '../../src/auth/edge-headers.ts'
import { headerValues, readAuthHeaders } from '../../src/core/raw-headers.ts'

const samples: string[][] = [
  [],
  ['Host', 'a', 'Authorization', 'Bearer x', 'Connection', 'keep-alive'],
  [
    'authorization',
    'Bearer a',
    'AUTHORIZATION',
    'Bearer b',
    'X-Tenant-Id',
    't1',
    'x-tenant-id',
    't2',
  ],
  [
    'X-Request-Id',
    'first',
    'x-request-id',
    'second',
    'Content-Type',
    'text/plain',
    'content-type',
    'x',
  ],
  ['Content-Type', 'application/x-www-form-urlencoded', 'X-REQUEST-ID', 'abc'],
  // Same lengths, other names: not read.
  ['Authorizatio1', 'Bearer x', 'x-tenant-ix', 't', 'x-request-ie', 'r', 'content-typf', 'c'],
  // U+212A KELVIN SIGN is not `k` here, nor is any non-ASCII letter.
  ['Authori\u017Fation', 'Bearer s', 'x-ten\u212Ant-id', 't', 'x-reque\u017Ft-id', 'r'],
  // A trailing name without a value is ignored.
  ['Authorization', 'Bearer x', 'X-Tenant-Id'],
]

describe('readEdgeHeaders', () => {
  for (const [index, raw] of samples.entries()) {
    it(`reads what readAuthHeaders and headerValues read (sample ${index})`, () => {
      const read = readEdgeHeaders(raw)
      const auth = readAuthHeaders(raw)
      assert.deepEqual(read.authorization, auth.authorization)
      assert.deepEqual(read.tenantIds, auth.tenantIds)
      assert.equal(read.requestId, headerValues(raw, 'x-request-id')[0])
      assert.equal(read.contentType, headerValues(raw, 'content-type')[0])
    })
  }

  it('keeps duplicates in arrival order and the first request id and content type', () => {
    const read = readEdgeHeaders(samples[2] as string[])
    assert.deepEqual(read.authorization, ['Bearer a', 'Bearer b'])
    assert.deepEqual(read.tenantIds, ['t1', 't2'])
    const ids = readEdgeHeaders(samples[3] as string[])
    assert.equal(ids.requestId, 'first')
    assert.equal(ids.contentType, 'text/plain')
  })
})
