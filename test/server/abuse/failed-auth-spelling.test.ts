/**
 * #11 item 4: once an address is over its failed-authentication limit, no spelling of a
 * request reaches verification or writes an audit row of its own. Raw requests over TLS
 * against the running server; audit rows are counted in its SQLite file.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, it } from 'node:test'
import { startTestServer, type TestServer } from '../../helpers/server.ts'

const FORGED_JWT =
  'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ4IiwidGVuYW50X2lkIjoiZGVtbyJ9.c2lnbmF0dXJl'

function auditRows(dataDir: string): { n: number; paths: string[]; details: string[] } {
  const db = new DatabaseSync(join(dataDir, 'tokengate.db'), { readOnly: true })
  try {
    const rows = db.prepare('SELECT details FROM audit_events').all() as { details: string }[]
    const details = rows.map((r) => r.details)
    return {
      n: rows.length,
      details,
      paths: details.map((d) => String((JSON.parse(d) as { path?: string }).path ?? '')),
    }
  } finally {
    db.close()
  }
}

/** Waits until the write-behind audit writer has flushed (its interval is 200 ms). */
const settle = () => new Promise((resolve) => setTimeout(resolve, 700))

function rawGet(server: TestServer, target: string, headers: string[] = []) {
  const lines = [`GET ${target} HTTP/1.1`, 'Host: localhost', 'Connection: close', ...headers]
  return server.raw(`${lines.join('\r\n')}\r\n\r\n`)
}

describe('failed-auth limit for every spelling of a request', () => {
  let server: TestServer
  before(async () => {
    server = await startTestServer({ rateLimit: { failedAuth: { max: 3, windowSec: 60 } } })
  })
  after(() => server.close())

  it('after the 429, encoded, absolute-form and forged-JWT requests get 429 and no audit row each', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await rawGet(server, '/api/v1/me', ['Authorization: Bearer pat_nope'])
      assert.equal(r.status, 401)
    }
    assert.equal((await rawGet(server, '/api/v1/me', ['Authorization: Bearer x'])).status, 429)
    await settle()
    const before = auditRows(server.dataDir).n

    const spellings = [
      ['/api/v%31/me', ['Authorization: Bearer pat_nope']],
      [`https://localhost:${server.port}/api/v1/me`, ['Authorization: Bearer pat_nope']],
      ['/api/v1/me', [`Authorization: Bearer ${FORGED_JWT}`, 'X-Tenant-Id: demo']],
      ['/api/v%31/me', [`Authorization: Bearer ${FORGED_JWT}`, 'X-Tenant-Id: demo']],
      [`https://localhost:${server.port}/api/v%31/tokens`, ['Authorization: Bearer pat_nope']],
    ] as const
    for (let round = 0; round < 5; round++) {
      for (const [target, headers] of spellings) {
        const r = await rawGet(server, target, [...headers])
        assert.equal(r.status, 429, `${target} answered ${r.status}`)
      }
      // Not a route at all: answered without verification either way.
      const r = await rawGet(server, '//api/v1/me', ['Authorization: Bearer pat_nope'])
      assert.ok(r.status === 404 || r.status === 429, `//api/v1/me answered ${r.status}`)
    }
    await settle()
    // At most the one aggregated event for this address and window.
    assert.ok(auditRows(server.dataDir).n - before <= 1, 'audit rows written while limited')
  })
})

describe('audit events under a flood', () => {
  let server: TestServer
  before(async () => {
    server = await startTestServer({ rateLimit: { failedAuth: { max: 5, windowSec: 60 } } })
  })
  after(() => server.close())

  it('stores at most 512 characters of a 15 KB path', async () => {
    const long = `/api/v1/${'a'.repeat(15_000)}`
    const r = await rawGet(server, long, ['Authorization: Bearer pat_nope'])
    assert.equal(r.status, 401)
    await settle()
    const { paths } = auditRows(server.dataDir)
    assert.equal(paths.length, 1)
    assert.ok(paths[0] !== undefined && paths[0].length <= 530, `stored ${paths[0]?.length}`)
    assert.ok(paths[0]?.endsWith('…[truncated]'))
  })

  it('writes one aggregated event with a count once the address is limited', async () => {
    for (let i = 0; i < 30; i++) await rawGet(server, '/api/v1/me', ['Authorization: Bearer x'])
    await server.running.close()
    const { details } = auditRows(server.dataDir)
    const throttled = details.map((d) => JSON.parse(d)).filter((d) => d.refused !== undefined)
    // 5 failures counted (1 from the test above, then 4), 26 refused.
    assert.equal(auditRows(server.dataDir).n, 5 + throttled.length)
    assert.equal(throttled.length, 1)
    assert.equal(throttled[0].refused, 26)
  })
})
