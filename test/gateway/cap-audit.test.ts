/**
 * The gateway's in-flight caps answer outside the gate's steps (after it allowed the
 * request): their 429 and 503 still go through the gate's recorder, one `auth.refused` audit
 * row with the answer's request id (#33), and usage counts the answer, not the gate's allow.
 */
import assert from 'node:assert/strict'
import { request as httpRequest } from 'node:http'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { openStore } from '../../src/stores/open-store.ts'
import type { UsageCounts } from '../../src/stores/store.ts'
import { auditRowOf } from '../helpers/audit-rows.ts'
import { OTHER_TENANT, useProxiedGateway } from './harness.ts'

function get(base: string, path: string, token: string) {
  const url = new URL(base)
  return new Promise<{ status: number; requestId: string; body: string }>((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path,
        agent: false,
        headers: { authorization: `Bearer ${token}` },
      },
      (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => {
          body += chunk
        })
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            requestId: String(res.headers['x-request-id']),
            body,
          }),
        )
      },
    )
    req.on('error', reject)
    req.end()
  })
}

describe('gateway: an in-flight cap refusal is audited through the recorder', () => {
  const proxied = useProxiedGateway({
    timeoutMs: 5_000,
    gateway: { connections: 4, maxInFlightPerTenant: 3, maxInFlightPerToken: 1 },
  })

  test('a second request of a token with one in flight → 429, auth.refused row with its request id', async () => {
    const token = await proxied.gateway.pat([])
    // Held by the upstream (it never answers /slow) until the gateway's timeout.
    const held = get(proxied.gateway.url, '/api/v1/slow', token).catch(() => undefined)
    for (let i = 0; i < 50 && proxied.upstream.receiving < 1; i++) await sleep(20)
    const refused = await get(proxied.gateway.url, '/api/v1/things', token)
    assert.equal(refused.status, 429, refused.body)
    assert.equal(JSON.parse(refused.body).requestId, refused.requestId)
    const row = await auditRowOf(proxied.gateway.dataDir, refused.requestId)
    assert.ok(row, 'no audit row for the cap refusal')
    assert.equal(row.type, 'auth.refused')
    assert.equal(row.outcome, 'rate_limited')
    assert.equal(row.clientAddress, '127.0.0.1')
    assert.match(String(row.actor), /^pat_/)
    assert.deepEqual(row.details, { method: 'GET', path: '/api/v1/things', status: 429 })
    await held
  })

  test('usage: the refused request counts as limited, not as allowed', async () => {
    // Its own tenant, so that only these two requests are in its counts.
    const token = await proxied.gateway.pat([], OTHER_TENANT)
    const inFlight = proxied.upstream.receiving
    const held = get(proxied.gateway.url, '/api/v1/slow', token).catch(() => undefined)
    for (let i = 0; i < 50 && proxied.upstream.receiving <= inFlight; i++) await sleep(20)
    const refused = await get(proxied.gateway.url, '/api/v1/things', token)
    assert.equal(refused.status, 429, refused.body)
    // The usage writer adds its counts to the store every 5 s (usage.flushIntervalMs).
    const store = await openStore({ dataDir: proxied.gateway.dataDir })
    let totals: UsageCounts = { allowed: 0, unauthorized: 0, forbidden: 0, limited: 0 }
    try {
      for (let i = 0; i < 100 && totals.allowed + totals.limited < 2; i++) {
        const now = Date.now()
        const rows = await store.readUsage({
          scope: 'tenant',
          subject: OTHER_TENANT,
          resolution: 'minute',
          since: now - 3_600_000,
          until: now + 60_000,
        })
        totals = rows.reduce(
          (sum, row) => ({
            allowed: sum.allowed + row.allowed,
            unauthorized: sum.unauthorized + row.unauthorized,
            forbidden: sum.forbidden + row.forbidden,
            limited: sum.limited + row.limited,
          }),
          { allowed: 0, unauthorized: 0, forbidden: 0, limited: 0 },
        )
        if (totals.allowed + totals.limited < 2) await sleep(100)
      }
    } finally {
      await store.close()
    }
    // The held request was allowed; the refused one is limited, not a second allow.
    assert.deepEqual(totals, { allowed: 1, unauthorized: 0, forbidden: 0, limited: 1 })
    await held
  })
})
