/**
 * The decision listener and the API listener of one process are two front ends of one gate:
 * the same request-id rule, one limiter with one counter store, the same outcome recorder
 * (audit, metrics). Each test here was a shipped drift between the copies of the pipeline.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { PROTECTED_PATH, send } from '../adapters/spec-table.ts'
import { type Stack, startStack } from './harness.ts'

const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`]

async function scrape(stack: Stack): Promise<string> {
  return (await fetch(stack.running.metricsUrl as string)).text()
}

/** The value of one sample line, 0 when absent. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line === undefined ? 0 : Number(line.slice(series.length + 1))
}

describe('decision listener: one request-id rule', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack()
  })
  after(() => stack?.close())

  test('a PAT sent as X-Request-Id is neither echoed nor forwarded as the request id', async () => {
    const response = await send(stack.decisionUrl, PROTECTED_PATH, [
      bearer(stack.tokens.pat),
      ['X-Request-Id', stack.tokens.unknownPat],
    ])
    assert.equal(response.status, 200)
    const id = String(response.headers['x-request-id'])
    assert.notEqual(id, stack.tokens.unknownPat)
    assert.doesNotMatch(JSON.stringify(response.headers), /pat_/)
  })

  test('an id of 65 safe characters is replaced, as the API listener replaces it', async () => {
    const long = 'a'.repeat(65)
    const viaDecision = await send(stack.decisionUrl, PROTECTED_PATH, [
      bearer(stack.tokens.pat),
      ['X-Request-Id', long],
    ])
    const viaApi = await send(stack.gatewayUrl, PROTECTED_PATH, [
      bearer(stack.tokens.pat),
      ['X-Request-Id', long],
    ])
    assert.notEqual(viaApi.headers['x-request-id'], long)
    assert.notEqual(viaDecision.headers['x-request-id'], long)
  })
})

describe('decision listener: one limiter for every listener of the process', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({ perTokenMax: 4, failedAuthMax: 4 })
  })
  after(() => stack?.close())

  test('per-token budget: requests through both listeners count against one allowance', async () => {
    const statuses: number[] = []
    for (const url of [stack.gatewayUrl, stack.decisionUrl, stack.gatewayUrl, stack.decisionUrl]) {
      statuses.push((await send(url, PROTECTED_PATH, [bearer(stack.tokens.pat)])).status)
    }
    const fifth = await send(stack.decisionUrl, PROTECTED_PATH, [bearer(stack.tokens.pat)])
    assert.deepEqual(statuses, [200, 200, 200, 200])
    assert.equal(fifth.status, 429, fifth.body)
  })

  test('failed-authentication budget: failures on both listeners count for one address', async () => {
    const statuses: number[] = []
    for (const url of [stack.gatewayUrl, stack.decisionUrl, stack.gatewayUrl, stack.decisionUrl]) {
      statuses.push((await send(url, PROTECTED_PATH, [bearer(stack.tokens.unknownPat)])).status)
    }
    const fifth = await send(stack.gatewayUrl, PROTECTED_PATH, [bearer(stack.tokens.unknownPat)])
    assert.deepEqual(statuses, [401, 401, 401, 401])
    assert.equal(fifth.status, 429, fifth.body)
  })
})

describe('decision listener: one outcome recorder', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({ metrics: true })
  })
  after(() => stack?.close())

  test('a decision is timed in the authentication-latency histogram', async () => {
    const series = 'tokengate_auth_duration_seconds_count{token_type="pat",outcome="ok"}'
    const before = sample(await scrape(stack), series)
    assert.equal(
      (await send(stack.decisionUrl, PROTECTED_PATH, [bearer(stack.tokens.pat)])).status,
      200,
    )
    assert.equal(sample(await scrape(stack), series) - before, 1)
  })

  test("the policy's refusals are counted under their own codes, on both listeners", async () => {
    const before = await scrape(stack)
    for (const url of [stack.gatewayUrl, stack.decisionUrl]) {
      const denied = await send(url, '/api/v1/internal/x', [bearer(stack.tokens.pat)])
      assert.equal(denied.status, 404)
      const otherTenant = await send(url, '/api/v1/tenants/bravo/files', [bearer(stack.tokens.pat)])
      assert.equal(otherTenant.status, 403)
    }
    const after = await scrape(stack)
    for (const metric of ['tokengate_http_requests_total', 'tokengate_decisions_total']) {
      const deny = `${metric}{code="route_denied",status="404"}`
      const tenant = `${metric}{code="tenant_path_mismatch",status="403"}`
      assert.equal(sample(after, deny) - sample(before, deny), 1, deny)
      assert.equal(sample(after, tenant) - sample(before, tenant), 1, tenant)
    }
  })
})
