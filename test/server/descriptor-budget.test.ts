import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { fitConnectionCaps } from '../../src/server/descriptor-budget.ts'

describe('fitConnectionCaps', () => {
  const defaults = { maxConnections: 4096, maxConnectionsPerAddress: 256 }

  it('leaves caps that fit alone, and an unknown or unlimited limit too', () => {
    for (const limit of [1_048_576, undefined, Number.POSITIVE_INFINITY]) {
      const fitted = fitConnectionCaps(defaults, { limit, inUse: 30 }, { connections: 11 })
      assert.deepEqual(fitted, { caps: defaults, warning: undefined })
    }
  })

  it('shrinks both caps by the same factor to what the descriptors allow, with a warning', () => {
    const { caps, warning } = fitConnectionCaps(
      defaults,
      { limit: 1024, inUse: 30 },
      { connections: 11 },
    )
    // 1024 - (30 + 11 + 64) = 919; 256 × 919 / 4096 = 57.
    assert.deepEqual(caps, { maxConnections: 919, maxConnectionsPerAddress: 57 })
    assert.match(warning ?? '', /1024 open files, ~105 needed.*using 919 \/ 57/)
  })

  it('a configured "no cap" becomes the budget; no per-address cap stays none', () => {
    const { caps } = fitConnectionCaps(
      { maxConnections: 0, maxConnectionsPerAddress: 0 },
      { limit: 256, inUse: 20 },
      { connections: 0 },
    )
    assert.deepEqual(caps, { maxConnections: 172, maxConnectionsPerAddress: 0 })
  })

  it('never goes below one connection', () => {
    const { caps } = fitConnectionCaps(defaults, { limit: 64, inUse: 60 }, { connections: 11 })
    assert.deepEqual(caps, { maxConnections: 1, maxConnectionsPerAddress: 1 })
  })
})
