import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { asciiLowerCase, canonicalRequestTarget } from '../../src/http/request-target.ts'

describe('canonicalRequestTarget', () => {
  test('decodes each segment once and drops the query and one trailing slash', () => {
    assert.deepEqual(canonicalRequestTarget('/api/v%31/a%20b/?x=%3b'), {
      ok: true,
      path: '/api/v1/a b',
      segments: ['api', 'v1', 'a b'],
    })
    assert.deepEqual(canonicalRequestTarget('/'), { ok: true, path: '/', segments: [] })
  })

  const refusals: ReadonlyArray<readonly [string, RegExp]> = [
    ['api/v1/x', /start with \//],
    ['http://h/api/v1/x', /start with \//],
    ['/api/v1/a\\b', /backslash/],
    ['/api/v1/a;b', /;/],
    ['/api/v1/a%3Bb', /;/],
    ['/api/v1/a%zz', /percent-encoding/],
    ['/api/v1/a%2fb', /encoded \//],
    ['/api/v1/a%5Cb', /encoded \//],
    ['/api/v1//a', /empty segment/],
    ['/api/v1/./a', /\. or \.\. segment/],
    ['/api/v1/%2e%2E/a', /\. or \.\. segment/],
    ['/api/v1/a./b', /ends with/],
    ['/api/v1/a%20', /ends with/],
    ['/api/v1/a%00', /control/],
    ['/api/v1/%C4%B1nternal', /non-ASCII/],
    ['/api/v1/\u0131nternal', /non-ASCII/],
  ]
  for (const [target, reason] of refusals) {
    test(`refuses ${target}`, () => {
      const result = canonicalRequestTarget(target)
      assert.equal(result.ok, false)
      assert.match(result.ok ? '' : result.reason, reason)
    })
  }

  test('ASCII-only case folding leaves non-ASCII letters alone', () => {
    assert.equal(asciiLowerCase('ADMIN-Path'), 'admin-path')
    assert.equal(asciiLowerCase('\u0130\u212A'), '\u0130\u212A')
    assert.notEqual('\u212A'.toLowerCase(), '\u212A')
  })
})
