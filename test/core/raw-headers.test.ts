import assert from 'node:assert/strict'
import { createServer, type IncomingMessage, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, test } from 'node:test'
import {
  type AuthInput,
  authInputFromHeaders,
  equalsAsciiLowercase,
  readAuthHeaders,
} from '../../src/core/raw-headers.ts'

describe('readAuthHeaders', () => {
  test('reads both headers whatever the case of their names', () => {
    assert.deepEqual(
      readAuthHeaders(['AUTHORIZATION', 'Bearer a', 'Host', 'x', 'X-TENANT-ID', 'acme']),
      { authorization: ['Bearer a'], tenantIds: ['acme'] },
    )
    assert.deepEqual(readAuthHeaders(['authorization', 'Bearer a', 'x-tenant-id', 'acme']), {
      authorization: ['Bearer a'],
      tenantIds: ['acme'],
    })
  })

  test('keeps every occurrence in arrival order', () => {
    assert.deepEqual(
      readAuthHeaders([
        'Authorization',
        'Bearer a',
        'X-Tenant-Id',
        't1',
        'authorization',
        'Bearer b',
        'x-tenant-id',
        't2',
      ]),
      { authorization: ['Bearer a', 'Bearer b'], tenantIds: ['t1', 't2'] },
    )
  })

  test('no headers → empty lists; values are not trimmed or split', () => {
    assert.deepEqual(readAuthHeaders([]), { authorization: [], tenantIds: [] })
    assert.deepEqual(readAuthHeaders(['X-Tenant-Id', ' a, b ']), {
      authorization: [],
      tenantIds: [' a, b '],
    })
  })

  test('look-alike names do not count (Kelvin sign, suffixes, prefixes)', () => {
    // U+212A KELVIN SIGN lowercases to "k" with String#toLowerCase.
    const kelvin = 'X-Tenant-Id'.replace('n', '\u212a')
    assert.equal(kelvin.length, 'x-tenant-id'.length)
    assert.deepEqual(
      readAuthHeaders([
        'Authorizations',
        'Bearer a',
        'Proxy-Authorization',
        'Bearer b',
        'X-Tenant-Id2',
        't',
        kelvin,
        't',
        'ıd',
        't',
      ]),
      { authorization: [], tenantIds: [] },
    )
  })

  test('an odd trailing name without a value is ignored', () => {
    assert.deepEqual(readAuthHeaders(['Authorization']), { authorization: [], tenantIds: [] })
  })

  test('sees duplicates that Node folds in req.headers (real socket)', {
    timeout: 5_000,
  }, async () => {
    const seen = await captureHeaders([
      'Authorization',
      'Bearer first',
      'authorization',
      'Bearer second',
      'X-Tenant-Id',
      't1',
      'x-tenant-id',
      't2',
    ])
    // What Node's folded view shows: one credential (the first) and one joined tenant.
    assert.equal(seen.folded.authorization, 'Bearer first')
    assert.equal(seen.folded['x-tenant-id'], 't1, t2')
    assert.deepEqual(seen.raw, {
      authorization: ['Bearer first', 'Bearer second'],
      tenantIds: ['t1', 't2'],
    })
  })
})

/** Sends one request with these raw headers to a local server; returns what it saw. */
function captureHeaders(
  headers: string[],
): Promise<{ raw: AuthInput; folded: IncomingMessage['headers'] }> {
  return new Promise((resolve, reject) => {
    const server = createServer((req, res) => {
      resolve({ raw: readAuthHeaders(req.rawHeaders), folded: req.headers })
      res.end()
    })
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo
      // Node adds no Host header to an array of headers, and the server requires one.
      const req = request({
        host: '127.0.0.1',
        port,
        headers: ['Host', 'localhost', 'Connection', 'close', ...headers],
      })
      req.on('error', reject)
      req.on('response', (res) => {
        res.resume()
        server.close()
        if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`))
      })
      req.end()
    })
  })
}

describe('authInputFromHeaders', () => {
  test('reads a Fetch Headers object (absent → empty list)', () => {
    const headers = new Headers({ Authorization: 'Bearer a' })
    assert.deepEqual(
      authInputFromHeaders((name) => headers.get(name)),
      {
        authorization: ['Bearer a'],
        tenantIds: [],
      },
    )
  })

  test('Fetch-joined duplicates stay one value, which the parser then refuses', () => {
    const headers = new Headers()
    headers.append('Authorization', 'Bearer a')
    headers.append('Authorization', 'Bearer b')
    headers.append('X-Tenant-Id', 't1')
    headers.append('X-Tenant-Id', 't2')
    assert.deepEqual(
      authInputFromHeaders((name) => headers.get(name)),
      {
        authorization: ['Bearer a, Bearer b'],
        tenantIds: ['t1, t2'],
      },
    )
  })

  test('array values (Node IncomingHttpHeaders style) keep every element', () => {
    const folded: Record<string, string | string[]> = { 'x-tenant-id': ['t1', 't2'] }
    assert.deepEqual(
      authInputFromHeaders((name) => folded[name]),
      { authorization: [], tenantIds: ['t1', 't2'] },
    )
  })

  test('asks for lowercase names', () => {
    const asked: string[] = []
    authInputFromHeaders((name) => {
      asked.push(name)
      return undefined
    })
    assert.deepEqual(asked.sort(), ['authorization', 'x-tenant-id'])
  })
})

describe('equalsAsciiLowercase', () => {
  /** The rule by its definition: ASCII upper case folded, every other unit compared as is. */
  function asciiFolded(name: string, lowercase: string): boolean {
    if (name.length !== lowercase.length) return false
    for (let i = 0; i < name.length; i++) {
      let c = name.charCodeAt(i)
      if (c >= 0x41 && c <= 0x5a) c += 0x20
      if (c !== lowercase.charCodeAt(i)) return false
    }
    return true
  }

  test('folds ASCII case only: every UTF-16 unit in every position of a name', () => {
    // toLowerCase maps U+212A KELVIN SIGN onto `k`: `coo\u212aie` must not read as Cookie.
    assert.equal(equalsAsciiLowercase('coo\u212aie', 'cookie'), false)
    assert.equal(equalsAsciiLowercase('CoOkIe', 'cookie'), true)
    for (const name of ['cookie', 'x-original-uri', 'host', 'authorization']) {
      for (let at = 0; at < name.length; at++) {
        for (let c = 0; c < 0x10000; c++) {
          const raw = name.slice(0, at) + String.fromCharCode(c) + name.slice(at + 1)
          if (equalsAsciiLowercase(raw, name) !== asciiFolded(raw, name)) {
            assert.fail(`${name} with U+${c.toString(16)} at ${at}`)
          }
        }
      }
    }
  })
})
