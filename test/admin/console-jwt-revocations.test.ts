/**
 * The console's JWT revocation page (issue #34) over raw HTTPS, as a browser calls it: a
 * rule made from the form (prefilled from a link) refuses the subject's JWT on the API, a
 * refused form keeps what was typed, removing the rule lets the token pass again, and both
 * acts are audited as the operator.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { DEV_ISSUER } from '../../src/dev/issuer.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import {
  adminRequest,
  bearer,
  issueAdminTokenCli,
  postSignIn,
  signInToConsole,
} from './admin-client.ts'

describe('console: JWT revocations', () => {
  let server: TestServer
  let operatorToken: string

  before(async () => {
    server = await startTestServer({ admin: { enabled: true, port: 0 } })
    ;({ token: operatorToken } = await issueAdminTokenCli(server, 'ops', 'operator'))
  })
  after(() => server.close())

  const signIn = () => signInToConsole(server, operatorToken)

  const me = (token: string) =>
    server.request('/api/v1/me', ['Authorization', `Bearer ${token}`, 'X-Tenant-Id', 'demo'])

  test('a rule made in the console refuses the JWT on the API; removing it lets it pass', async () => {
    const minted = await server.cli(
      'jwt',
      'mint',
      '--dev',
      '--tenant',
      'demo',
      '--subject',
      'carol',
    )
    assert.equal(minted.code, 0, minted.stderr)
    const jwt = minted.stdout.trim()
    assert.equal((await me(jwt)).status, 200)
    const b = await signIn()

    const linked = await b.get(
      `/admin/jwt-revocations?issuer=${encodeURIComponent(DEV_ISSUER)}&kind=sub&value=carol`,
    )
    assert.equal(linked.status, 200)
    assert.match(linked.text, /<option value="sub" selected>/)
    assert.match(linked.text, /id="jr-value" name="value" type="text" value="carol"/)
    assert.match(linked.text, /<caption>0 rules<\/caption>/)

    const badTime = await b.post('/admin/jwt-revocations', {
      issuer: DEV_ISSUER,
      kind: 'sub',
      value: 'carol',
      before: 'yesterday-ish',
    })
    assert.equal(badTime.status, 400)
    assert.match(badTime.text, /before: an ISO 8601 time/)
    assert.match(badTime.text, /value="yesterday-ish"/)

    const made = await b.post('/admin/jwt-revocations', {
      issuer: DEV_ISSUER,
      kind: 'sub',
      value: 'carol',
      before: '',
      reason: 'left the company',
    })
    assert.equal(made.status, 303, made.text)
    const page = await b.get(String(made.headers.location))
    const notice = /<p class="notice ok"[^>]*>([^<]*)<\/p>/.exec(page.text)?.[1] ?? ''
    assert.match(
      notice,
      /^Revoked sub carol of https:\/\/dev-issuer\.tokengate\.local: rule jrv_\S+\.$/,
    )
    const id = /rule (jrv_[\w-]+)\./.exec(notice)?.[1] as string
    assert.match(page.text, /<caption>1 rule<\/caption>/)
    assert.match(page.text, new RegExp(`data-rule-id="${id}"`))

    let status = 200
    for (let i = 0; i < 150 && status !== 401; i++) {
      status = (await me(jwt)).status
      if (status !== 401) await new Promise((r) => setTimeout(r, 20))
    }
    assert.equal(status, 401, 'the JWT is refused once the rule is made')

    const removed = await b.post(`/admin/jwt-revocations/${id}/remove`, {})
    assert.equal(removed.status, 303)
    for (let i = 0; i < 150 && status !== 200; i++) {
      status = (await me(jwt)).status
      if (status !== 200) await new Promise((r) => setTimeout(r, 20))
    }
    assert.equal(status, 200, 'the JWT passes again once the rule is removed')

    const audit = await adminRequest(server, '/admin/api/v1/audit-events?limit=50', {
      headers: bearer(operatorToken),
    })
    const events = audit.json.events as {
      type: string
      actor: string
      details: { rule?: string }
    }[]
    for (const type of ['jwt.revoked', 'jwt.revocation_removed']) {
      const event = events.find((e) => e.type === type && e.details.rule === id)
      assert.ok(event, `${type} audited`)
      assert.equal(event.actor, 'admin:ops')
    }
  })

  test('a read-only operator sees the rules but no form', async () => {
    const { token } = await issueAdminTokenCli(server, 'viewer', 'read-only')
    const response = await postSignIn(server, token)
    const cookie = String(response.headers['set-cookie']).split(';')[0] as string
    const page = await adminRequest(server, '/admin/jwt-revocations', { headers: { cookie } })
    assert.equal(page.status, 200)
    assert.match(page.text, /<h1>JWT revocations<\/h1>/)
    assert.ok(!page.text.includes('action="/admin/jwt-revocations"'))
  })
})
