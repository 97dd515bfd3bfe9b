/**
 * The decision listener's refusals before the gate (a path outside /api/v1, an unknown
 * original method, a steering header) go through the gate's recorder: one `auth.refused`
 * audit row each, with the answer's request id (#33). Raw requests against the running
 * listener, as a proxy sends them, and a CheckRequest to its gRPC ext_authz service.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { send } from '../adapters/spec-table.ts'
import { auditRowOf } from '../helpers/audit-rows.ts'
import { checkRequest as envoyCheckRequest } from './envoy-check-requests.ts'
import { connectEnvoyAuthorization, type EnvoyAuthorization } from './envoy-client.ts'
import { type Stack, startStack } from './harness.ts'

describe('decision listener: pre-gate refusals are audited', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({ proxy: 'nginx' })
  })
  after(() => stack?.close())

  const cases: { name: string; lines: [string, string][]; status: number; code: string }[] = [
    {
      name: 'a path outside /api/v1 → 404 not_found',
      lines: [
        ['X-Original-Method', 'GET'],
        ['X-Original-URI', '/elsewhere'],
      ],
      status: 404,
      code: 'not_found',
    },
    {
      name: 'an original method nobody knows → 400 validation_failed',
      lines: [
        ['X-Original-Method', 'BREW'],
        ['X-Original-URI', '/api/v1/things'],
      ],
      status: 400,
      code: 'validation_failed',
    },
    {
      name: 'a steering header passed on → 400 validation_failed',
      lines: [
        ['X-Original-Method', 'GET'],
        ['X-Original-URI', '/api/v1/things'],
        ['X-HTTP_Method-Override', 'DELETE'],
      ],
      status: 400,
      code: 'validation_failed',
    },
  ]
  for (const c of cases) {
    test(c.name, async () => {
      const lines: [string, string][] = [
        ['Authorization', `Bearer ${stack.tokens.pat}`],
        ...c.lines,
      ]
      const response = await send(stack.decisionUrl, '/', lines)
      assert.equal(response.status, c.status, response.body)
      const requestId = String(response.headers['x-request-id'])
      assert.equal(JSON.parse(response.body).requestId, requestId)
      const row = await auditRowOf(stack.dataDir, requestId)
      assert.ok(row, 'no audit row for the refusal')
      assert.equal(row.type, 'auth.refused')
      assert.equal(row.outcome, c.code)
      assert.equal((row.details as { status: number }).status, c.status)
      assert.equal(row.clientAddress, '127.0.0.1')
    })
  }
})

describe('decision gRPC (Envoy ext_authz): pre-gate refusals are audited', () => {
  let stack: Stack
  let client: EnvoyAuthorization<Checked>
  before(async () => {
    stack = await startStack({ proxy: 'envoy', grpc: true })
    client = connectEnvoyAuthorization(stack.grpcUrl as string, { numericEnums: true })
  })
  after(async () => {
    client?.close()
    await stack?.close()
  })

  test('a path outside /api/v1 → denied 404, auth.refused row with its request id', async () => {
    const request = envoyCheckRequest('GET', '/elsewhere', [['x-request-id', 'grpc-pre-gate-1']], {
      raw: true,
    }) as { attributes: { request: { http: { header_map: { headers: { key: string }[] } } } } }
    // The helper's own fixed id first: keep only this test's.
    const map = request.attributes.request.http.header_map
    const own = map.headers.findIndex((h) => h.key === 'x-request-id')
    map.headers.splice(own, 1)
    const response = await client.check(request)
    assert.equal(Number(response.denied_response?.status?.code), 404)
    const row = await auditRowOf(stack.dataDir, 'grpc-pre-gate-1')
    assert.ok(row, 'no audit row for the refusal')
    assert.equal(row.type, 'auth.refused')
    assert.equal(row.outcome, 'not_found')
  })
})

interface Checked {
  denied_response?: { status?: { code: number | string } }
}
