import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { createTestIssuer, startKeyServer } from '../helpers/jwt.ts'
import { needsSources } from '../helpers/launch.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { adminRequest, bearer, issueAdminTokenCli } from './admin-client.ts'

const DAY_MS = 86_400_000

describe('admin API on its own listener', () => {
  let server: TestServer
  let operator: string
  let readOnly: string
  let operatorId: string

  before(async () => {
    server = await startTestServer({
      admin: { enabled: true, port: 0 },
      usage: { flushIntervalMs: 100 },
    })
    ;({ token: operator, id: operatorId } = await issueAdminTokenCli(server, 'alice', 'operator'))
    ;({ token: readOnly } = await issueAdminTokenCli(server, 'rory', 'read-only'))
  })
  after(() => server.close())

  test('is a separate HTTPS listener on loopback; the API port does not serve it', async () => {
    const admin = new URL(server.running.adminUrl as string)
    assert.equal(admin.protocol, 'https:')
    assert.equal(admin.hostname, '127.0.0.1')
    assert.notEqual(admin.port, String(server.port))
    const onApiPort = await server.request('/admin/api/v1/me', [
      'Authorization',
      `Bearer ${operator}`,
    ])
    assert.equal(onApiPort.status, 404)
    const onAdmin = await adminRequest(server, '/admin/api/v1/me', { headers: bearer(operator) })
    assert.equal(onAdmin.status, 200)
    assert.deepEqual(
      { actor: onAdmin.json.actor, role: onAdmin.json.role },
      { actor: 'admin:alice', role: 'operator' },
    )
  })

  test('is off unless configured', async () => {
    const plain = await startTestServer()
    try {
      assert.equal(plain.running.adminUrl, undefined)
    } finally {
      await plain.close()
    }
  })

  test('no credential: 401 problem+json with the API vocabulary and a challenge', async () => {
    const response = await adminRequest(server, '/admin/api/v1/tenants')
    assert.equal(response.status, 401)
    assert.match(String(response.headers['content-type']), /^application\/problem\+json/)
    assert.equal(response.json.code, 'missing_authorization')
    assert.match(String(response.headers['www-authenticate']), /^Bearer realm="tokengate-admin"/)
  })

  test('API tokens are not operator credentials: a valid PAT gets 401', async () => {
    const pat = server.running.devSeed?.demoPat as string
    assert.equal(
      (await server.request('/api/v1/me', ['Authorization', `Bearer ${pat}`])).status,
      200,
    )
    const response = await adminRequest(server, '/admin/api/v1/tenants', { headers: bearer(pat) })
    assert.equal(response.status, 401)
    assert.equal(response.json.code, 'invalid_token')
  })

  test('a forged or malformed admin token gets 401', async () => {
    const forged = `tga_${'A'.repeat(40)}`
    for (const [header, code] of [
      [`Bearer ${forged}`, 'invalid_token'],
      [`Bearer ${operator} x`, 'malformed_authorization'],
      [`Basic ${operator}`, 'malformed_authorization'],
    ] as const) {
      const response = await adminRequest(server, '/admin/api/v1/me', {
        headers: { authorization: header },
      })
      assert.equal(response.status, 401, header)
      assert.equal(response.json.code, code)
    }
  })

  test('read-only reads but every write is 403 insufficient_permission, and nothing changes', async () => {
    assert.equal(
      (await adminRequest(server, '/admin/api/v1/tenants', { headers: bearer(readOnly) })).status,
      200,
    )
    const writes: [string, string, unknown][] = [
      ['POST', '/admin/api/v1/tenants', { id: 'ro-made' }],
      ['POST', '/admin/api/v1/tenants/demo/disable', undefined],
      ['POST', '/admin/api/v1/pats', { tenantId: 'demo', subject: 'x' }],
      ['POST', '/admin/api/v1/pats/revoke-leaked', { token: server.running.devSeed?.demoPat }],
      ['POST', '/admin/api/v1/issuers', { issuer: 'https://x', audiences: ['a'], keySource: {} }],
      ['DELETE', '/admin/api/v1/issuers/x', undefined],
    ]
    for (const [method, path, body] of writes) {
      const response = await adminRequest(server, path, { method, headers: bearer(readOnly), body })
      assert.equal(response.status, 403, `${method} ${path}`)
      assert.equal(response.json.code, 'insufficient_permission')
    }
    const tenants = await adminRequest(server, '/admin/api/v1/tenants', {
      headers: bearer(operator),
    })
    const ids = (tenants.json.tenants as { id: string; enabled: boolean }[]).map((t) => t.id)
    assert.ok(!ids.includes('ro-made'))
    const pat = server.running.devSeed?.demoPat as string
    assert.equal(
      (await server.request('/api/v1/me', ['Authorization', `Bearer ${pat}`])).status,
      200,
    )
  })

  test('tenants: create, conflict, disable and enable, audited with the operator as actor', async () => {
    const h = bearer(operator)
    const created = await adminRequest(server, '/admin/api/v1/tenants', {
      method: 'POST',
      headers: h,
      body: { id: 'acme', name: 'Acme Corp' },
    })
    assert.equal(created.status, 201)
    const again = await adminRequest(server, '/admin/api/v1/tenants', {
      method: 'POST',
      headers: h,
      body: { id: 'acme' },
    })
    assert.equal(again.status, 409)
    assert.match(String(again.headers['content-type']), /problem\+json/)
    const bad = await adminRequest(server, '/admin/api/v1/tenants', {
      method: 'POST',
      headers: h,
      body: { id: 'bad id!' },
    })
    assert.equal(bad.status, 400)
    assert.equal(bad.json.code, 'validation_failed')
    const disabled = await adminRequest(server, '/admin/api/v1/tenants/acme/disable', {
      method: 'POST',
      headers: h,
    })
    assert.equal(disabled.json.enabled, false)
    const enabled = await adminRequest(server, '/admin/api/v1/tenants/acme/enable', {
      method: 'POST',
      headers: h,
    })
    assert.equal(enabled.json.enabled, true)
    const audit = await adminRequest(server, '/admin/api/v1/audit-events?tenant=acme', {
      headers: h,
    })
    const events = audit.json.events as { type: string; actor: string; clientAddress: string }[]
    assert.deepEqual(
      events.map((e) => [e.type, e.actor]),
      [
        ['tenant.enabled', 'admin:alice'],
        ['tenant.disabled', 'admin:alice'],
        ['tenant.created', 'admin:alice'],
      ],
    )
    assert.equal(events[0]?.clientAddress, '127.0.0.1')
  })

  test('PATs: issue (plaintext once), works on /api/v1, search, rotate with grace, revoke, revoke-leaked', async () => {
    const h = bearer(operator)
    await adminRequest(server, '/admin/api/v1/tenants', {
      method: 'POST',
      headers: h,
      body: { id: 'pats-t' },
    })
    const issued = await adminRequest(server, '/admin/api/v1/pats', {
      method: 'POST',
      headers: h,
      body: {
        tenantId: 'pats-t',
        subject: 'ci-bot',
        name: 'deploy',
        permissions: ['tokens:read'],
        expiresInDays: 3,
      },
    })
    assert.equal(issued.status, 201)
    const token = issued.json.token as string
    assert.match(token, /^pat_/)
    assert.equal(
      (await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])).status,
      200,
    )

    // Listings never carry the token or its hash.
    const search = await adminRequest(server, '/admin/api/v1/pats?subject=CI-B&tenant=pats-t', {
      headers: h,
    })
    assert.equal(search.status, 200)
    assert.ok(!search.text.includes(token))
    assert.ok(!search.text.includes('tokenHash'))
    const [found] = search.json.tokens as { id: string; last4: string; status: string }[]
    assert.equal(found?.status, 'active')
    const byLast4 = await adminRequest(server, `/admin/api/v1/pats?last4=${token.slice(-4)}`, {
      headers: h,
    })
    assert.equal((byLast4.json.tokens as unknown[]).length, 1)
    const expiring = await adminRequest(
      server,
      '/admin/api/v1/pats?tenant=pats-t&expiringWithinDays=7',
      { headers: h },
    )
    assert.equal((expiring.json.tokens as unknown[]).length, 1)
    const notYet = await adminRequest(
      server,
      '/admin/api/v1/pats?tenant=pats-t&expiringWithinDays=1',
      { headers: h },
    )
    assert.equal((notYet.json.tokens as unknown[]).length, 0)

    const rotated = await adminRequest(server, `/admin/api/v1/pats/${found?.id}/rotate`, {
      method: 'POST',
      headers: h,
      body: { graceSeconds: 3600, expiresInDays: 30 },
    })
    assert.equal(rotated.status, 201)
    const graced = await adminRequest(server, '/admin/api/v1/pats?tenant=pats-t&status=grace', {
      headers: h,
    })
    assert.deepEqual(
      (graced.json.tokens as { id: string }[]).map((t) => t.id),
      [found?.id],
    )
    const newToken = rotated.json.token as string
    assert.equal(
      (await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])).status,
      200,
    )

    const revoked = await adminRequest(server, `/admin/api/v1/pats/${rotated.json.id}/revoke`, {
      method: 'POST',
      headers: h,
    })
    assert.equal(revoked.json.status, 'revoked')
    const leaked = await adminRequest(server, '/admin/api/v1/pats/revoke-leaked', {
      method: 'POST',
      headers: h,
      body: { token },
    })
    assert.equal(leaked.json.outcome, 'revoked')
    assert.ok(!leaked.text.includes(token))
    const deadline = Date.now() + 5000
    let statuses: number[] = []
    while (Date.now() < deadline) {
      statuses = [
        (await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])).status,
        (await server.request('/api/v1/me', ['Authorization', `Bearer ${newToken}`])).status,
      ]
      if (statuses.every((s) => s === 401)) break
      await new Promise((r) => setTimeout(r, 100))
    }
    assert.deepEqual(statuses, [401, 401])

    const audit = await adminRequest(
      server,
      '/admin/api/v1/audit-events?tenant=pats-t&actor=admin:alice',
      { headers: h },
    )
    const types = (audit.json.events as { type: string }[]).map((e) => e.type)
    assert.deepEqual(types, [
      'pat.leak_revoked',
      'pat.revoked',
      'pat.rotated',
      'pat.issued',
      'tenant.created',
    ])
    assert.ok(!audit.text.includes(token) && !audit.text.includes(newToken))
  })

  test('audit: type and time filters, cursor pagination, CSV and JSON export', async () => {
    const h = bearer(operator)
    for (const id of ['pg-1', 'pg-2', 'pg-3']) {
      await adminRequest(server, '/admin/api/v1/tenants', {
        method: 'POST',
        headers: h,
        body: { id },
      })
    }
    const first = await adminRequest(
      server,
      '/admin/api/v1/audit-events?type=tenant.created&limit=2',
      { headers: h },
    )
    assert.equal((first.json.events as unknown[]).length, 2)
    const cursor = first.json.nextCursor as string
    assert.ok(cursor)
    const second = await adminRequest(
      server,
      `/admin/api/v1/audit-events?type=tenant.created&limit=2&cursor=${cursor}`,
      { headers: h },
    )
    const seen = new Set(
      [...(first.json.events as { id: string }[]), ...(second.json.events as { id: string }[])].map(
        (e) => e.id,
      ),
    )
    assert.equal(seen.size, 4)
    const future = new Date(Date.now() + DAY_MS).toISOString()
    const none = await adminRequest(server, `/admin/api/v1/audit-events?since=${future}`, {
      headers: h,
    })
    assert.deepEqual(none.json.events, [])
    const badCursor = await adminRequest(server, '/admin/api/v1/audit-events?cursor=%%%', {
      headers: h,
    })
    assert.equal(badCursor.status, 400)

    const csv = await adminRequest(
      server,
      '/admin/api/v1/audit-events?type=tenant.created&format=csv',
      { headers: h },
    )
    assert.equal(csv.status, 200)
    assert.match(String(csv.headers['content-type']), /^text\/csv/)
    assert.match(String(csv.headers['content-disposition']), /attachment/)
    const lines = csv.text.trim().split('\r\n')
    assert.equal(lines[0], 'id,time,type,tenantId,actor,outcome,clientAddress,requestId,details')
    assert.ok(lines.slice(1).every((l) => l.includes(',tenant.created,')))
    const json = await adminRequest(
      server,
      '/admin/api/v1/audit-events?type=tenant.created&format=json',
      { headers: h },
    )
    assert.equal((json.json.events as unknown[]).length, lines.length - 1)
  })

  test('issuers: add with the core rules, list with key health, remove', async () => {
    const h = bearer(operator)
    const issuer = createTestIssuer({ issuer: 'https://idp.example', audience: 'api' })
    const keys = await startKeyServer({ keys: [issuer.publicJwk] })
    try {
      const refused = await adminRequest(server, '/admin/api/v1/issuers', {
        method: 'POST',
        headers: h,
        body: {
          issuer: 'https://idp.example',
          audiences: ['api'],
          keySource: { kind: 'jwks_url', url: 'http://evil.example/jwks' },
        },
      })
      assert.equal(refused.status, 400)
      const added = await adminRequest(server, '/admin/api/v1/issuers', {
        method: 'POST',
        headers: h,
        body: {
          issuer: 'https://idp.example',
          audiences: ['api'],
          keySource: { kind: 'jwks_url', url: keys.url },
        },
      })
      assert.equal(added.status, 201)
      let view: { keys: { state: string; lastFetchAt: string | null } } | undefined
      const deadline = Date.now() + 5000
      while (Date.now() < deadline) {
        const list = await adminRequest(server, '/admin/api/v1/issuers', { headers: h })
        view = (
          list.json.issuers as {
            issuer: string
            keys: { state: string; lastFetchAt: string | null }
          }[]
        ).find((i) => i.issuer === 'https://idp.example')
        if (view?.keys.state === 'fresh') break
        await new Promise((r) => setTimeout(r, 100))
      }
      assert.equal(view?.keys.state, 'fresh')
      assert.ok(view?.keys.lastFetchAt)
      const removed = await adminRequest(
        server,
        `/admin/api/v1/issuers/${encodeURIComponent('https://idp.example')}`,
        {
          method: 'DELETE',
          headers: h,
        },
      )
      assert.equal(removed.status, 204)
      const gone = await adminRequest(
        server,
        `/admin/api/v1/issuers/${encodeURIComponent('https://idp.example')}`,
        {
          method: 'DELETE',
          headers: h,
        },
      )
      assert.equal(gone.status, 404)
    } finally {
      await keys.close()
    }
  })

  test('bad input is 400 validation_failed, naming the field', async () => {
    const h = bearer(operator)
    const cases: [string, string, unknown, RegExp][] = [
      ['GET', '/admin/api/v1/pats?expiringWithinDays=0', undefined, /^expiringWithinDays:/],
      ['GET', '/admin/api/v1/pats?status=lost', undefined, /^status: one of/],
      ['GET', '/admin/api/v1/pats?limit=500', undefined, /^limit:/],
      ['GET', '/admin/api/v1/audit-events?format=xml', undefined, /^format:/],
      ['GET', '/admin/api/v1/audit-events?until=later', undefined, /^until:/],
      ['POST', '/admin/api/v1/pats', { tenantId: 'demo' }, /^subject: required/],
      [
        'POST',
        '/admin/api/v1/pats',
        { tenantId: 'demo', subject: 's', permissions: 'x' },
        /^permissions: expected an array/,
      ],
      [
        'POST',
        '/admin/api/v1/pats',
        { tenantId: 'demo', subject: 's', expiresInDays: 1.5 },
        /^expiresInDays:/,
      ],
      ['POST', '/admin/api/v1/pats/tok_x/rotate', { graceSeconds: -1 }, /^graceSeconds:/],
      // The lifecycle's bound (pat-lifecycle.ts), worded in this field's unit.
      [
        'POST',
        '/admin/api/v1/pats/tok_x/rotate',
        { graceSeconds: 2_592_001 },
        /^graceSeconds: an integer from 0 to 2592000 \(30 days\)$/,
      ],
      [
        'POST',
        '/admin/api/v1/pats/tok_x/rotate',
        { graceSeconds: 1.5 },
        /^graceSeconds: an integer from 0 to 2592000 \(30 days\)$/,
      ],
      ['POST', '/admin/api/v1/issuers', { issuer: 'https://x' }, /^audiences: expected a list/],
      ['POST', '/admin/api/v1/tenants', { id: 'ok-id', name: 7 }, /^name: required string/],
      // The CLI's operator-input rules (core/operator-text.ts): bidi, zero-width, C1, dots only.
      ['POST', '/admin/api/v1/tenants', { id: 'ok-id', name: 'x\u202etxt.exe' }, /^name:.*bidi/],
      ['POST', '/admin/api/v1/tenants', { id: '..', name: 'dots' }, /^tenant id:/],
      ['POST', '/admin/api/v1/pats', { tenantId: 'demo', subject: 'ali\u200bce' }, /^subject:/],
      [
        'POST',
        '/admin/api/v1/pats',
        { tenantId: 'demo', subject: 's', name: 'a\u009bb' },
        /^name:/,
      ],
    ]
    for (const [method, path, body, detail] of cases) {
      const response = await adminRequest(server, path, { method, headers: h, body })
      assert.equal(response.status, 400, `${method} ${path}`)
      assert.equal(response.json.code, 'validation_failed')
      assert.match(String(response.json.detail), detail)
    }
    const never = await adminRequest(server, '/admin/api/v1/pats', {
      method: 'POST',
      headers: h,
      body: { tenantId: 'demo', subject: 'forever', expiresInDays: null },
    })
    assert.equal(never.status, 201)
    assert.equal(never.json.expiresAt, null)
    const rotateUnknown = await adminRequest(server, '/admin/api/v1/pats/tok_nope/rotate', {
      method: 'POST',
      headers: h,
    })
    assert.equal(rotateUnknown.status, 404)
  })

  test('status: readiness, change feed, request and failure rates of every instance', async () => {
    await server.request('/api/v1/me')
    const read = () => adminRequest(server, '/admin/api/v1/status', { headers: bearer(readOnly) })
    // The rates come from the usage counts in the store, written behind (usage.flushIntervalMs).
    // Waits for this request's own count (a 401): earlier tests' requests already make the
    // request rate positive before it is written.
    for (let i = 0; i < 100; i++) {
      const rates = (await read()).json.rates as { failuresPerSecond: number }
      if (rates.failuresPerSecond > 0) break
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    const status = await read()
    assert.equal(status.status, 200)
    assert.equal(status.json.store, 'ok')
    assert.equal(status.json.storeKind, 'sqlite')
    assert.deepEqual(status.json.changeFeed, {
      state: 'not_needed',
      detail: 'SQLite: one process; other processes are polled',
    })
    const rates = status.json.rates as {
      scope: string
      requestsPerSecond: number
      failuresPerSecond: number
    }
    assert.equal(rates.scope, 'cluster')
    assert.ok(rates.requestsPerSecond > 0)
    assert.ok(rates.failuresPerSecond > 0)
    const requests = status.json.requests as { resolution: string; points: unknown[] }
    assert.deepEqual([requests.resolution, requests.points.length], ['minute', 60])
  })

  test('OpenAPI 3.1: served, printable by the CLI, and every GET path answers', async () => {
    const served = await adminRequest(server, '/admin/api/v1/openapi.json', {
      headers: bearer(readOnly),
    })
    assert.equal(served.json.openapi, '3.1.0')
    const printed = await server.cli('admin', 'openapi')
    assert.equal(printed.code, 0)
    assert.deepEqual(JSON.parse(printed.stdout), served.json)
    const pats = await adminRequest(server, '/admin/api/v1/pats?tenant=demo', {
      headers: bearer(readOnly),
    })
    const patId = (pats.json.tokens as { id: string }[])[0]?.id as string
    for (const [path, ops] of Object.entries(
      served.json.paths as Record<string, Record<string, unknown>>,
    )) {
      if (!('get' in ops)) continue
      const concrete = path
        .replace('/tenants/{id}', '/tenants/demo')
        .replace('/pats/{id}', `/pats/${patId}`)
      const response = await adminRequest(server, `/admin/api/v1${concrete}`, {
        headers: bearer(readOnly),
      })
      assert.equal(response.status, 200, path)
    }
  })

  test('security headers on every answer', async () => {
    for (const response of [
      await adminRequest(server, '/admin/api/v1/me', { headers: bearer(operator) }),
      await adminRequest(server, '/admin/sign-in'),
      await adminRequest(server, '/nope'),
    ]) {
      assert.match(
        String(response.headers['content-security-policy']),
        /default-src 'self'.*frame-ancestors 'none'/,
      )
      assert.equal(response.headers['x-frame-options'], 'DENY')
      assert.equal(response.headers['cache-control'], 'no-store')
      assert.equal(response.headers['x-content-type-options'], 'nosniff')
    }
  })

  test('a revoked admin token is refused at once', async () => {
    const { token, id } = await issueAdminTokenCli(server, 'temp', 'operator', '1h')
    assert.equal(
      (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(token) })).status,
      200,
    )
    const revoke = await server.cli('admin', 'token', 'revoke', id)
    assert.equal(revoke.code, 0)
    assert.equal(
      (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(token) })).status,
      401,
    )
    const audit = await adminRequest(
      server,
      '/admin/api/v1/audit-events?type=admin_token.revoked',
      { headers: bearer(operator) },
    )
    assert.equal(
      (audit.json.events as { details: { adminTokenId: string } }[])[0]?.details.adminTokenId,
      id,
    )
    assert.ok(operatorId.startsWith('adm_'))
  })

  test('an expired admin token is refused', {
    skip: needsSources('it moves the server clock'),
  }, async () => {
    const short = await issueAdminTokenCli(server, 'short', 'operator', '1h')
    server.clock.advance(2 * 3_600_000)
    try {
      assert.equal(
        (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(short.token) })).status,
        401,
      )
    } finally {
      server.clock.advance(-2 * 3_600_000)
    }
  })

  test('no admin token or PAT plaintext is ever logged', async () => {
    const log = server.logs.join('\n')
    assert.ok(!log.includes(operator))
    assert.ok(!log.includes(readOnly))
    assert.match(log, /admin request/)
  })
})

describe('operator SSO through the configured OIDC issuer', () => {
  test('an operator JWT with the role claim is an operator; without it 403; another issuer 401', async () => {
    const idp = createTestIssuer({ issuer: 'https://sso.example', audience: 'tokengate-admin' })
    const keys = await startKeyServer({ keys: [idp.publicJwk] })
    // A server that fails to start must not leave the key server holding this file open.
    const server = await startTestServer({
      admin: {
        enabled: true,
        port: 0,
        oidc: { issuer: 'https://sso.example', audience: 'tokengate-admin', jwksUrl: keys.url },
      },
    }).catch(async (error: unknown) => {
      await keys.close()
      throw error
    })
    try {
      const jwt = await idp.sign({ sub: 'dana@example.com', tokengate_admin_roles: ['operator'] })
      const me = await adminRequest(server, '/admin/api/v1/me', { headers: bearer(jwt) })
      assert.equal(me.status, 200)
      assert.deepEqual([me.json.actor, me.json.role], ['oidc:dana@example.com', 'operator'])
      const created = await adminRequest(server, '/admin/api/v1/tenants', {
        method: 'POST',
        headers: bearer(jwt),
        body: { id: 'sso-made' },
      })
      assert.equal(created.status, 201)
      const audit = await adminRequest(server, '/admin/api/v1/audit-events?tenant=sso-made', {
        headers: bearer(jwt),
      })
      assert.equal((audit.json.events as { actor: string }[])[0]?.actor, 'oidc:dana@example.com')

      const viewer = await idp.sign({ sub: 'v', tokengate_admin_roles: ['read-only'] })
      const refused = await adminRequest(server, '/admin/api/v1/tenants', {
        method: 'POST',
        headers: bearer(viewer),
        body: { id: 'nope' },
      })
      assert.equal(refused.status, 403)
      const noRole = await idp.sign({ sub: 'x', tokengate_admin_roles: undefined })
      assert.equal(
        (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(noRole) })).status,
        403,
      )
      const other = createTestIssuer({ issuer: 'https://sso.example', audience: 'tokengate-admin' })
      const forged = await other.sign({ sub: 'mallory', tokengate_admin_roles: ['operator'] })
      assert.equal(
        (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(forged) })).status,
        401,
      )
      const wrongAud = await idp.sign({ aud: 'api', tokengate_admin_roles: ['operator'] })
      assert.equal(
        (await adminRequest(server, '/admin/api/v1/me', { headers: bearer(wrongAud) })).status,
        401,
      )
    } finally {
      await server.close()
      await keys.close()
    }
  })
})
