/**
 * Request ids never start with `-` (or `_`): an id is pasted into `grep`, `journalctl -g`
 * and CLI arguments, where a leading `-` reads as an option. Both the generated ids and the
 * caller's `X-Request-Id` kept as it is.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createRequestIdGenerator, requestIdOf } from '../../src/http/request-id.ts'

describe('request ids', () => {
  it('a generated id starts with a letter or digit (5,000 generators)', () => {
    for (let i = 0; i < 5000; i++) {
      const id = createRequestIdGenerator()()
      assert.match(id, /^[A-Za-z0-9][A-Za-z0-9._:-]*$/, id)
    }
  })

  it("a caller's id starting with - or _ is replaced; one starting with a letter or digit is kept", () => {
    const fresh = () => 'generated'
    assert.equal(requestIdOf('-rf', fresh), 'generated')
    assert.equal(requestIdOf('_x', fresh), 'generated')
    assert.equal(requestIdOf('abc-123', fresh), 'abc-123')
    assert.equal(requestIdOf('7.a:b', fresh), '7.a:b')
  })
})
