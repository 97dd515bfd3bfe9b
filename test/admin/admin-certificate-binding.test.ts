/**
 * A PAT's certificate binding (RFC 8705) through the admin API: set at issue and by PATCH,
 * shown on read, cleared with null, a malformed thumbprint refused naming the field; the
 * binding takes effect on the API (a bound key without a certificate is 401 invalid_token);
 * the audit names the thumbprint (a public certificate's hash), never the token. The console's
 * key form sets, shows and clears it, and keeps a refused value in the input.
 */
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { adminRequest, bearer, issueAdminTokenCli, signInToConsole } from './admin-client.ts'

const THUMBPRINT = 'lEIq3-ZRHtP3l5kJ2S5sFj2e2Ak4WaWfG9rnh3ZgT1c'

let server: TestServer
let operator: string

before(async () => {
  server = await startTestServer({
    admin: { enabled: true, port: 0 },
    rateLimit: { failedAuth: { max: 0 } },
  })
  ;({ token: operator } = await issueAdminTokenCli(server, 'olive', 'operator'))
})
after(() => server?.close())

const api = (path: string, method = 'GET', body?: unknown) =>
  adminRequest(server, `/admin/api/v1${path}`, { method, headers: bearer(operator), body })
const me = (token: string) => server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])

/** Polls until `status` answers (every instance applies a change within a second). */
async function eventually(token: string, status: number): Promise<number> {
  let last = 0
  for (let i = 0; i < 40; i++) {
    last = (await me(token)).status
    if (last === status) return last
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return last
}

test('issue bound, read it back, unbind and bind again by PATCH; bad thumbprints refused', async () => {
  const issued = await api('/pats', 'POST', {
    tenantId: 'demo',
    subject: 'mtls-client',
    certificateThumbprint: THUMBPRINT,
  })
  assert.equal(issued.status, 201, issued.text)
  assert.equal(issued.json.certificateThumbprint, THUMBPRINT)
  const token = issued.json.token as string
  const id = issued.json.id as string
  // Bound, and this client has no certificate (the test server asks for none).
  const refused = await me(token)
  assert.equal(refused.status, 401)
  assert.equal(refused.json.code, 'invalid_token')

  const read = await api(`/pats/${id}`)
  assert.equal(read.json.certificateThumbprint, THUMBPRINT)
  assert.ok(!read.text.includes(token))

  const unbound = await api(`/pats/${id}`, 'PATCH', { certificateThumbprint: null })
  assert.equal(unbound.status, 200, unbound.text)
  assert.equal(unbound.json.certificateThumbprint, null)
  assert.equal(await eventually(token, 200), 200)

  const rebound = await api(`/pats/${id}`, 'PATCH', { certificateThumbprint: THUMBPRINT })
  assert.equal(rebound.status, 200, rebound.text)
  assert.equal(await eventually(token, 401), 401)

  for (const bad of ['abc', `${THUMBPRINT}=`, 42]) {
    const answer = await api(`/pats/${id}`, 'PATCH', { certificateThumbprint: bad })
    assert.equal(answer.status, 400, answer.text)
    assert.match(answer.text, /certificate/i)
  }
  const badIssue = await api('/pats', 'POST', {
    tenantId: 'demo',
    subject: 'x',
    certificateThumbprint: 'not-a-thumbprint',
  })
  assert.equal(badIssue.status, 400, badIssue.text)

  const events = await api('/audit-events?type=pat.updated')
  assert.equal(events.status, 200, events.text)
  assert.ok(events.text.includes(THUMBPRINT), 'pat.updated names the binding before/after')
  assert.ok(!events.text.includes(token))
})

test('console: the key form binds, the key page shows it, a bad value is refused beside its field', async () => {
  const { get, post } = await signInToConsole(server, operator, '/admin/pats')

  const issued = await post('/admin/pats', {
    tenantId: 'demo',
    subject: 'console-mtls',
    externalId: 'cert-console',
    certificateThumbprint: THUMBPRINT,
  })
  assert.equal(issued.headers.location, '/admin/pats/issued', issued.text)
  const list = await get('/admin/pats?externalId=cert-console')
  const id = /data-token-id="(tok_\w+)"/.exec(list.text)?.[1] as string
  const page = await get(`/admin/pats/${id}`)
  assert.match(page.text, new RegExp(`<dt>Bound certificate</dt><dd><code>${THUMBPRINT}</code>`))
  assert.match(page.text, new RegExp(`name="certificateThumbprint"[^>]*value="${THUMBPRINT}"`))

  const refused = await post(`/admin/pats/${id}/edit`, {
    externalId: 'cert-console',
    certificateThumbprint: 'abc',
  })
  assert.equal(refused.status, 400, refused.text)
  assert.match(
    refused.text,
    /class="field-error">certificate thumbprint: &quot;abc&quot; is not valid/,
  )
  assert.match(refused.text, /name="certificateThumbprint"[^>]*value="abc"/)

  const cleared = await post(`/admin/pats/${id}/edit`, {
    externalId: 'cert-console',
    certificateThumbprint: '',
  })
  assert.equal(cleared.status, 303, cleared.text)
  const read = await api(`/pats/${id}`)
  assert.equal(read.json.certificateThumbprint, null)
})
