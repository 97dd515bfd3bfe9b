/**
 * The admin listener's edges, attacked as raw requests: an unexpected content type is 415
 * (never a 503 "store not reachable", which pages whoever watches for outages), and every 400
 * is a problem body that names the bad field without internals (no JavaScript error text,
 * stack or class name).
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { adminRequest, bearer, issueAdminTokenCli } from './admin-client.ts'

const INTERNALS =
  /TypeError|ReferenceError|SyntaxError|Cannot read|undefined|is not a function|\n\s+at /

describe('admin edges: content types and 400s', () => {
  let server: TestServer
  let operator: string

  before(async () => {
    server = await startTestServer({ admin: { enabled: true, port: 0 } })
    ;({ token: operator } = await issueAdminTokenCli(server, 'edge', 'operator'))
  })
  after(() => server.close())

  const origin = () => new URL(server.running.adminUrl as string).origin

  test('sign-in with an unexpected content type is 415, not 503', async () => {
    for (const type of ['text/plain', 'application/xml', 'multipart/form-data; boundary=x']) {
      const response = await adminRequest(server, '/admin/sign-in', {
        method: 'POST',
        headers: { 'content-type': type, origin: origin() },
        body: `credential=${operator}`,
      })
      assert.equal(response.status, 415, type)
      assert.match(String(response.headers['content-type']), /^application\/problem\+json/)
      assert.equal(response.json.code, 'unsupported_media_type')
      assert.ok(!response.text.includes(operator))
    }
  })

  test('API writes with an unexpected content type are 415', async () => {
    const response = await adminRequest(server, '/admin/api/v1/tenants', {
      method: 'POST',
      headers: { ...bearer(operator), 'content-type': 'text/plain' },
      body: '{"id":"plain"}',
    })
    assert.equal(response.status, 415)
    assert.equal(response.json.code, 'unsupported_media_type')
  })

  test('an issuer with keySource.kind "secret" (or any unknown shape) is a clean 400', async () => {
    const bodies = [
      { issuer: 'https://idp.example', audiences: ['api'], keySource: { kind: 'secret' } },
      { issuer: 'https://idp.example', audiences: ['api'], keySource: { kind: 'nope' } },
      { issuer: 'https://idp.example', audiences: ['api'], keySource: { kind: 'jwks', jwks: 7 } },
      { issuer: 'https://idp.example', audiences: ['api'], keySource: { kind: 'pem', pem: 3 } },
      { issuer: 'https://idp.example', audiences: [1], keySource: { kind: 'oidc_discovery' } },
    ]
    for (const body of bodies) {
      const response = await adminRequest(server, '/admin/api/v1/issuers', {
        method: 'POST',
        headers: bearer(operator),
        body,
      })
      assert.equal(response.status, 400, `${JSON.stringify(body)} → ${response.text}`)
      assert.match(String(response.headers['content-type']), /^application\/problem\+json/)
      assert.equal(response.json.code, 'validation_failed')
      assert.doesNotMatch(String(response.json.detail), INTERNALS, response.text)
    }
  })

  test('malformed JSON and wrong shapes are problem bodies without internals', async () => {
    const cases: [string, string, string | unknown][] = [
      ['POST', '/admin/api/v1/tenants', '{"id": '],
      ['POST', '/admin/api/v1/tenants', '[]'],
      ['POST', '/admin/api/v1/tenants', { id: 7 }],
      ['POST', '/admin/api/v1/pats', { tenantId: 'demo', subject: 'x', permissions: 'all' }],
      ['POST', '/admin/api/v1/pats', { tenantId: 'demo', subject: 'x', quota: { limit: 'lots' } }],
      ['POST', '/admin/api/v1/pats', { tenantId: 'demo', subject: 'x', metadata: 'no' }],
      ['PATCH', '/admin/api/v1/tenants/demo', { rateLimit: { max: 0, windowSec: 1 } }],
      ['POST', '/admin/api/v1/issuers', '"just a string"'],
    ]
    for (const [method, path, body] of cases) {
      const response = await adminRequest(server, path, { method, headers: bearer(operator), body })
      assert.equal(
        response.status,
        400,
        `${method} ${path} ${JSON.stringify(body)}: ${response.text}`,
      )
      assert.match(String(response.headers['content-type']), /^application\/problem\+json/)
      assert.equal(response.json.code, 'validation_failed')
      assert.doesNotMatch(String(response.json.detail), INTERNALS, response.text)
    }
  })
})
