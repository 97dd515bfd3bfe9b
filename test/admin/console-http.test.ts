/**
 * The console's HTML endpoints over raw HTTPS, as a browser would call them (session cookie,
 * CSRF field, Origin): every write path, the failure pages, export and the live-tail feed.
 * The real-browser journey is console.browser.test.ts.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import {
  type AdminResponse,
  adminRequest,
  bearer,
  issueAdminTokenCli,
  postSignIn,
} from './admin-client.ts'

interface Browser {
  cookie: string
  csrf: string
  get(path: string): Promise<AdminResponse>
  post(path: string, form: Record<string, string>): Promise<AdminResponse>
}

describe('console over HTTP', () => {
  let server: TestServer
  let operatorToken: string
  let origin: string

  async function signIn(token: string): Promise<Browser> {
    const response = await postSignIn(server, token)
    assert.equal(response.status, 303)
    assert.equal(response.headers.location, '/admin/tenants')
    const setCookie = String(response.headers['set-cookie'])
    assert.match(
      setCookie,
      /^__Host-tokengate-admin=[\w-]{43}; Path=\/; Secure; HttpOnly; SameSite=Strict; Max-Age=\d+$/,
    )
    const cookie = setCookie.split(';')[0] as string
    const get = (path: string) => adminRequest(server, path, { headers: { cookie } })
    const page = await get('/admin/tenants')
    const csrf = /name="_csrf" value="([\w-]+)"/.exec(page.text)?.[1] as string
    return {
      cookie,
      csrf,
      get,
      post: (path, form) =>
        adminRequest(server, path, {
          method: 'POST',
          headers: { cookie, origin, 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({ _csrf: csrf, ...form }).toString(),
        }),
    }
  }

  /**
   * A refused form answered again: its status, the refusal shown beside the field (or atop
   * the form), and what was typed still in the inputs.
   */
  function refusedForm(response: AdminResponse, status: number): string {
    assert.equal(response.status, status, response.text)
    assert.match(String(response.headers['content-type']), /^text\/html/)
    return (
      /<p id="[\w-]+-error" class="field-error">([^<]*)<\/p>/.exec(response.text)?.[1] ??
      /<p class="notice error" role="alert">([^<]*)<\/p>/.exec(response.text)?.[1] ??
      ''
    )
  }

  /** Follows one 303 and returns the page with its notice. */
  async function notice(b: Browser, response: AdminResponse): Promise<string> {
    assert.equal(response.status, 303, response.text)
    const page = await b.get(String(response.headers.location))
    return /<p class="notice (?:ok|error)"[^>]*>([^<]*)<\/p>/.exec(page.text)?.[1] ?? ''
  }

  before(async () => {
    server = await startTestServer({ admin: { enabled: true, port: 0 } })
    origin = new URL(server.running.adminUrl as string).origin
    ;({ token: operatorToken } = await issueAdminTokenCli(server, 'ops', 'operator'))
  })
  after(() => server.close())

  test('pages need a session; a bad credential is sent back to sign-in', async () => {
    for (const path of ['/admin/', '/admin/tenants', '/admin/pats', '/admin/audit/export']) {
      const response = await adminRequest(server, path)
      assert.equal(response.status, 303, path)
      assert.equal(response.headers.location, '/admin/sign-in')
    }
    assert.equal((await adminRequest(server, '/admin/audit/feed')).status, 401)
    const bad = await adminRequest(server, '/admin/sign-in', {
      method: 'POST',
      headers: { origin, 'content-type': 'application/x-www-form-urlencoded' },
      body: `credential=${server.running.devSeed?.demoPat}`,
    })
    assert.equal(bad.headers.location, '/admin/sign-in?failed=1')
    const page = await adminRequest(server, '/admin/sign-in?failed=1')
    assert.match(page.text, /That credential was not accepted/)
    assert.ok(!page.text.includes(String(server.running.devSeed?.demoPat)))
    const crossSite = await adminRequest(server, '/admin/sign-in', {
      method: 'POST',
      headers: {
        origin: 'https://evil.example',
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: `credential=${operatorToken}`,
    })
    assert.equal(crossSite.status, 403)
    assert.equal(crossSite.headers['set-cookie'], undefined)
  })

  test('tenants, tokens, leaked tokens, issuers: every console write, audited as the operator', async () => {
    const b = await signIn(operatorToken)
    assert.equal(
      await notice(b, await b.post('/admin/tenants', { id: 'web', name: 'Web' })),
      'Created tenant web.',
    )
    assert.equal(
      refusedForm(await b.post('/admin/tenants', { id: 'web', name: 'Again' }), 409),
      'tenant web already exists',
    )
    const badId = await b.post('/admin/tenants', { id: 'no spaces', name: 'Kept Name' })
    assert.equal(
      refusedForm(badId, 400),
      'tenant id: &quot;no spaces&quot; is not valid; expected 1-64 characters of A-Z a-z 0-9 . _ -, not only dots and dashes',
    )
    assert.match(
      badId.text,
      /id="tenant-id" name="id" type="text" value="no spaces"[^>]*aria-invalid="true"/,
    )
    assert.match(badId.text, /id="tenant-name" name="name" type="text" value="Kept Name"/)
    assert.equal(
      await notice(b, await b.post('/admin/tenants/web/disable', {})),
      'Tenant web disabled.',
    )
    assert.equal(
      await notice(b, await b.post('/admin/tenants/web/disable', {})),
      'Tenant web was already disabled.',
    )
    assert.equal(
      refusedForm(await b.post('/admin/pats', { tenantId: 'web', subject: 's' }), 409),
      'tenant web is disabled',
    )
    assert.equal(
      await notice(b, await b.post('/admin/tenants/web/enable', {})),
      'Tenant web enabled.',
    )

    const issued = await b.post('/admin/pats', {
      tenantId: 'web',
      subject: 'svc',
      permissions: 'tokens:read  audit:read',
      expiresInDays: '10',
    })
    assert.equal(issued.headers.location, '/admin/pats/issued')
    assertCaptionsAgree((await b.get('/admin/admin-tokens')).text)
    const shown = await b.get('/admin/pats/issued')
    const token = /value="(pat_[0-9A-Za-z]{38})"/.exec(shown.text)?.[1] as string
    assert.ok(token)
    assert.match((await b.get('/admin/pats/issued')).text, /Token already shown/)
    const list = await b.get('/admin/pats?tenant=web&status=active&expiringWithinDays=30')
    assert.match(list.text, new RegExp(`pat_…${token.slice(-4)}`))
    assert.ok(!list.text.includes(token))
    const badPermission = await b.post('/admin/pats', {
      tenantId: 'web',
      subject: 'kept-subject',
      permissions: 'tokens:read Bad',
      quotaLimit: '10',
    })
    assert.match(refusedForm(badPermission, 400), /^permission: &quot;Bad&quot; is not valid/)
    assert.match(badPermission.text, /value="kept-subject"/)
    assert.match(badPermission.text, /value="tokens:read Bad"[^>]*aria-invalid="true"/)
    assert.match(badPermission.text, /name="quotaLimit" type="text" value="10"/)
    assert.match(
      refusedForm(await b.post('/admin/pats', { tenantId: 'web', subject: '' }), 400),
      /^subject: &quot;&quot; is not valid/,
    )
    const badQuota = await b.post('/admin/pats', {
      tenantId: 'web',
      subject: 's',
      quotaLimit: 'lots',
    })
    assert.match(
      refusedForm(badQuota, 400),
      /^quota: &quot;lots&quot; is not valid; expected a whole number/,
    )

    const tokenId = /data-token-id="(tok_\w+)"/.exec(list.text)?.[1] as string
    const rotated = await b.post(`/admin/pats/${tokenId}/rotate`, { graceHours: '2' })
    assert.equal(rotated.headers.location, '/admin/pats/issued')
    const rotatedPage = await b.get('/admin/pats/issued')
    assert.match(rotatedPage.text, new RegExp(`replacing ${tokenId} \\(the old token works until`))
    assert.match(rotatedPage.text, /value="pat_[0-9A-Za-z]{38}"/)
    const graced = await b.get('/admin/pats?tenant=web&status=grace')
    assert.match(graced.text, new RegExp(tokenId))
    assert.equal(
      await notice(b, await b.post(`/admin/pats/${tokenId}/rotate`, {})),
      `${tokenId} was already rotated`,
    )
    assert.match(
      await notice(b, await b.post(`/admin/pats/${tokenId}/rotate`, { graceHours: '-1' })),
      /^grace:/,
    )
    // The lifecycle's bound (pat-lifecycle.ts), worded in the form's unit.
    assert.equal(
      await notice(b, await b.post(`/admin/pats/${tokenId}/rotate`, { graceHours: '721' })),
      'grace: whole hours from 0 to 720 (30 days)',
    )

    assert.equal(
      await notice(b, await b.post('/admin/pats/revoke-leaked', { token })),
      `pat_…${token.slice(-4)} revoked.`,
    )
    assert.equal(
      await notice(b, await b.post('/admin/pats/revoke-leaked', { token })),
      `pat_…${token.slice(-4)} was already revoked.`,
    )
    assert.match(
      await notice(b, await b.post('/admin/pats/revoke-leaked', { token: 'hello' })),
      /is not a tokengate PAT\.$/,
    )
    assert.equal(
      await notice(b, await b.post('/admin/pats/tok_nope/revoke', {})),
      'no token tok_nope',
    )

    assert.equal(
      await notice(
        b,
        await b.post('/admin/issuers', {
          issuer: 'https://idp.test',
          audience: 'api',
          jwksUrl: 'https://idp.test/jwks',
        }),
      ),
      'Added issuer https://idp.test.',
    )
    const issuers = await b.get('/admin/issuers')
    assert.match(issuers.text, /https:\/\/idp\.test\/jwks/)
    assertCaptionsAgree(issuers.text)
    assertCaptionsAgree((await b.get('/admin/tenants')).text)
    const badIssuer = await b.post('/admin/issuers', {
      issuer: 'https://bad.test',
      audience: 'api',
      jwksUrl: 'http://bad.test/jwks',
    })
    assert.match(refusedForm(badIssuer, 400), /https/)
    assert.match(badIssuer.text, /value="http:\/\/bad.test\/jwks"/)
    assert.equal(
      await notice(b, await b.post('/admin/issuers/remove', { issuer: 'https://idp.test' })),
      'Removed issuer https://idp.test.',
    )
    assert.equal(
      await notice(b, await b.post('/admin/issuers/remove', { issuer: 'https://idp.test' })),
      'no issuer https://idp.test',
    )

    const audit = await adminRequest(
      server,
      '/admin/api/v1/audit-events?actor=admin:ops&limit=200',
      { headers: bearer(operatorToken) },
    )
    const types = new Set((audit.json.events as { type: string }[]).map((e) => e.type))
    for (const type of [
      'tenant.created',
      'tenant.disabled',
      'tenant.enabled',
      'pat.issued',
      'pat.leak_revoked',
      'issuer.added',
      'issuer.removed',
    ]) {
      assert.ok(types.has(type), type)
    }
  })

  test('keys as a product: a key page edits, disables and shows usage; refused edits keep the input', async () => {
    const b = await signIn(operatorToken)
    await b.post('/admin/tenants', { id: 'prod' })
    const issued = await b.post('/admin/pats', {
      tenantId: 'prod',
      subject: 'partner',
      rateLimitMax: '5',
      rateLimitWindowSec: '1',
      quotaLimit: '100',
      quotaRefill: 'monthly',
      metadata: '{"plan":"pro"}',
      externalId: 'cus_9',
    })
    assert.equal(issued.headers.location, '/admin/pats/issued')
    const list = await b.get('/admin/pats?externalId=cus_9')
    const id = /data-token-id="(tok_\w+)"/.exec(list.text)?.[1] as string
    assert.match(list.text, /5\/1s, quota 100 monthly/)
    const keyPage = await b.get(`/admin/pats/${id}`)
    assert.match(keyPage.text, /100 of 100 uses left, refills/)
    assert.match(keyPage.text, /&quot;plan&quot;: &quot;pro&quot;/)
    assert.match(keyPage.text, /<svg viewBox/)
    assert.match(keyPage.text, /href="\/admin\/usage.csv\?scope=key&amp;id=tok_/)

    const refused = await b.post(`/admin/pats/${id}/edit`, {
      name: 'kept name',
      permissions: '',
      expiresAt: '',
      quotaLimit: '0',
      quotaRefill: 'monthly',
      metadata: '{"plan":"pro"}',
    })
    assert.equal(refused.status, 400)
    assert.match(
      refused.text,
      /id="e-quotaLimit-error" class="field-error">quota: 0 is not valid; expected a whole number of uses/,
    )
    assert.match(refused.text, /name="name" type="text" value="kept name"/)
    assert.match(refused.text, /name="quotaLimit" type="text" value="0"[^>]*aria-invalid="true"/)
    const badJson = await b.post(`/admin/pats/${id}/edit`, { name: 'x', metadata: '{nope' })
    assert.equal(badJson.status, 400)
    assert.match(badJson.text, /metadata: &quot;\{nope&quot; is not valid/)
    assert.match(
      badJson.text,
      /<textarea id="e-metadata" name="metadata"[^>]*aria-invalid="true"[^>]*>\{nope<\/textarea>/,
    )

    const saved = await b.post(`/admin/pats/${id}/edit`, {
      name: 'renamed',
      permissions: 'tokens:read',
      expiresAt: '2099-01-31',
      rateLimitMax: '',
      rateLimitWindowSec: '',
      quotaLimit: '50',
      quotaRefill: 'interval',
      quotaIntervalHours: '12',
      metadata: '',
      externalId: 'cus_9',
    })
    assert.equal(await notice(b, saved), `Saved ${id}.`)
    const api = await adminRequest(server, `/admin/api/v1/pats/${id}`, {
      headers: bearer(operatorToken),
    })
    assert.deepEqual(
      [api.json.name, api.json.rateLimit, api.json.quota, api.json.metadata, api.json.expiresAt],
      [
        'renamed',
        null,
        { limit: 50, refill: 'interval', intervalSec: 43_200 },
        null,
        '2099-01-31T23:59:59.999Z',
      ],
    )
    assert.equal(
      await notice(b, await b.post(`/admin/pats/${id}/disable`, {})),
      `pat_…${String(api.json.last4)} is now disabled.`,
    )
    assert.match((await b.get(`/admin/pats/${id}`)).text, /status-disabled">disabled/)
    assert.equal(
      await notice(b, await b.post(`/admin/pats/${id}/enable`, {})),
      `pat_…${String(api.json.last4)} is now enabled.`,
    )
    const csv = await b.get(`/admin/usage.csv?scope=key&id=${id}&resolution=hour`)
    assert.match(String(csv.headers['content-type']), /^text\/csv/)
    assert.ok(csv.text.startsWith('start,resolution,scope,subject,'))
  })

  test('tenant page: rate limit edit (kept input when refused), usage, busiest keys', async () => {
    const b = await signIn(operatorToken)
    await b.post('/admin/tenants', { id: 'tpage' })
    const refused = await b.post('/admin/tenants/tpage/edit', {
      name: 'T Page',
      rateLimitMax: '-5',
      rateLimitWindowSec: '60',
    })
    assert.equal(refused.status, 400)
    assert.match(refused.text, /rate limit: &quot;-5&quot; is not valid; expected a whole number/)
    assert.match(refused.text, /name="name" type="text" value="T Page"/)
    assert.equal(
      await notice(
        b,
        await b.post('/admin/tenants/tpage/edit', {
          name: 'T Page',
          rateLimitMax: '500',
          rateLimitWindowSec: '60',
        }),
      ),
      'Saved tenant tpage.',
    )
    const page = await b.get('/admin/tenants/tpage?resolution=day')
    assert.match(page.text, /500 per 60 s/)
    assert.match(page.text, /Busiest keys/)
    assert.match(page.text, /aria-current="true">Last 30 days, per day/)
    assert.match((await b.get('/admin/tenants/nobody')).text, /No such tenant/)
  })

  test('admin tokens page: operators issue (shown once) and revoke; read-only sees the list only', async () => {
    const b = await signIn(operatorToken)
    const refused = await b.post('/admin/admin-tokens', {
      name: 'bad name!',
      role: 'operator',
      expiresInDays: '7',
    })
    assert.equal(refused.status, 400)
    assert.match(refused.text, /value="bad name!"/)
    const issued = await b.post('/admin/admin-tokens', {
      name: 'dora',
      role: 'read-only',
      expiresInDays: '7',
    })
    assert.equal(issued.headers.location, '/admin/pats/issued')
    assertCaptionsAgree((await b.get('/admin/admin-tokens')).text)
    const shown = await b.get('/admin/pats/issued')
    const token = /value="(tga_[0-9A-Za-z]{40})"/.exec(shown.text)?.[1] as string
    assert.ok(token)
    assert.match(shown.text, /href="\/admin\/admin-tokens">Done/)
    const dora = await signIn(token)
    const page = await dora.get('/admin/admin-tokens')
    assert.match(page.text, /dora/)
    assert.ok(!page.text.includes('Issue admin token'))
    const listed = await b.get('/admin/admin-tokens')
    const doraId = new RegExp(
      `data-admin-token-id="(adm_\\w+)"><td[^>]*><code>tga_…${token.slice(-4)}`,
    ).exec(listed.text)?.[1]
    assert.ok(doraId)
    assert.match(
      await notice(b, await b.post(`/admin/admin-tokens/${doraId}/revoke`, {})),
      /^Revoked admin token of dora/,
    )
    assert.equal((await dora.get('/admin/admin-tokens')).status, 303, 'her session ended')
  })

  test('a console form posted as JSON or text is 415', async () => {
    const b = await signIn(operatorToken)
    for (const type of ['application/json', 'text/plain']) {
      const response = await adminRequest(server, '/admin/tenants', {
        method: 'POST',
        headers: { cookie: b.cookie, origin, 'content-type': type },
        body: JSON.stringify({ _csrf: b.csrf, id: 'json-made' }),
      })
      assert.equal(response.status, 415, type)
      assert.equal(response.json.code, 'unsupported_media_type')
    }
  })

  test('audit page: filters, pages, export and the live-tail feed', async () => {
    const b = await signIn(operatorToken)
    for (const id of ['a1', 'a2', 'a3']) await b.post('/admin/tenants', { id })
    const first = await b.get('/admin/audit?type=tenant.created&limit=2')
    assert.equal(first.status, 200)
    const older = /href="(\/admin\/audit\?[^"]*cursor=[^"]+)"/.exec(first.text)?.[1]
    assert.ok(older)
    const second = await b.get(older.replaceAll('&amp;', '&'))
    assert.equal(second.status, 200)
    assert.match(second.text, /tenant\.created/)
    const csv = await b.get('/admin/audit/export?type=tenant.created&format=csv')
    assert.match(String(csv.headers['content-type']), /^text\/csv/)
    assert.ok(csv.text.split('\r\n').length > 3)
    const json = await b.get('/admin/audit/export?type=tenant.created&format=json')
    assert.ok((json.json.events as unknown[]).length >= 3)
    const since = new Date(Date.now() - 60_000).toISOString()
    const feed = await b.get(
      `/admin/audit/feed?type=tenant.created&after=${encodeURIComponent(since)}`,
    )
    assert.ok((feed.json.events as { type: string }[]).every((e) => e.type === 'tenant.created'))
    const bad = await b.get('/admin/audit?since=yesterday')
    assert.equal(bad.status, 400)
    assert.match(bad.text, /since: expected an ISO 8601 time/)
    const status = await b.get('/admin/status')
    assert.match(status.text, /<svg viewBox/)
  })

  test('sign-out ends the session; a read-only session cannot write', async () => {
    const b = await signIn(operatorToken)
    const out = await b.post('/admin/sign-out', {})
    assert.equal(out.headers.location, '/admin/sign-in')
    assert.match(String(out.headers['set-cookie']), /Max-Age=0/)
    assert.equal((await b.get('/admin/tenants')).status, 303)

    const { token } = await issueAdminTokenCli(server, 'viewer', 'read-only')
    const ro = await signIn(token)
    const page = await ro.get('/admin/tenants')
    assert.ok(!page.text.includes('Create tenant'))
    const refused = await ro.post('/admin/tenants', { id: 'ro-made' })
    assert.equal(refused.status, 403)
  })

  test('the admin listener answers problem+json for bad bodies and unknown paths', async () => {
    const h = { ...bearer(operatorToken), 'content-type': 'application/json' }
    const broken = await adminRequest(server, '/admin/api/v1/tenants', {
      method: 'POST',
      headers: h,
      body: '{',
    })
    assert.equal(broken.status, 400)
    assert.equal(broken.json.code, 'validation_failed')
    const big = await adminRequest(server, '/admin/api/v1/tenants', {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ id: 'x'.repeat(70_000) }),
    })
    assert.equal(big.status, 413)
    const array = await adminRequest(server, '/admin/api/v1/tenants', {
      method: 'POST',
      headers: h,
      body: '[]',
    })
    assert.equal(array.status, 400)
    const notFound = await adminRequest(server, '/admin/api/v1/nope', { headers: h })
    assert.equal(notFound.status, 404)
    assert.equal(notFound.json.code, 'not_found')
    const anonymous = await adminRequest(server, '/admin/api/v1/nope')
    assert.equal(anonymous.status, 401)
    const root = await adminRequest(server, '/')
    assert.equal(root.headers.location, '/admin/')
    const stray = await adminRequest(server, '/elsewhere')
    assert.equal(stray.status, 404)
    assert.equal(stray.json.code, 'not_found')
  })
})

/** Every `<caption>N nouns</caption>` says one noun for 1 and the plural otherwise. */
function assertCaptionsAgree(page: string): void {
  const captions = [...page.matchAll(/<caption>(\d+) ([a-z ]+?)<\/caption>/g)]
  assert.ok(captions.length > 0, 'a counted caption')
  for (const [caption, count, noun] of captions) {
    assert.equal(Number(count) === 1, !noun?.endsWith('s'), caption)
  }
}
