import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, it } from 'node:test'
import { fingerprintToken } from '../../src/core/fingerprint.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { createTestIssuer, type TestIssuer } from '../helpers/jwt.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { addIssuerWithCli, issuePatWithCli } from '../helpers/server-cli.ts'

/**
 * The running server over a real TLS socket: the wire-only variants of SPEC §5.3 / §7 and
 * DESIGN's rules beyond the shared table (which test/server/spec-table.test.ts runs), and the
 * built-in endpoints, with PATs issued through the CLI code path and JWTs
 * from a key registered as an issuer through the CLI.
 */
describe('tokengate over HTTPS (end to end)', () => {
  let server: TestServer
  let idp: TestIssuer
  const tokens: string[] = []
  let readerPat: string
  let plainPat: string
  let plainPatId: string
  let otherTenantPat: string

  const bearer = (token: string) => ['Authorization', `Bearer ${token}`]
  const tenant = (id: string) => ['X-Tenant-Id', id]

  async function issuePat(tenantId: string, ...permissions: string[]) {
    const flags = permissions.flatMap((p) => ['--permission', p])
    const issued = await issuePatWithCli(server, tenantId, ...flags)
    tokens.push(issued.token)
    return issued
  }

  async function jwt(claims: Record<string, unknown> = {}, options = {}) {
    const token = await idp.sign({ tenant_id: 'acme', ...claims }, options)
    tokens.push(token)
    return token
  }

  before(async () => {
    server = await startTestServer()
    idp = createTestIssuer({
      alg: 'ES256',
      issuer: 'https://idp.example.test',
      audience: 'tokengate',
    })
    for (const id of ['acme', 'other']) {
      assert.equal((await server.cli('tenant', 'create', id)).code, 0)
    }
    await addIssuerWithCli(server, idp, { alg: 'ES256' })
    readerPat = (await issuePat('acme', 'tokens:read', 'audit:read')).token
    const plain = await issuePat('acme')
    plainPat = plain.token
    plainPatId = plain.id
    otherTenantPat = (await issuePat('other', 'tokens:read')).token
    // The server learns of the CLI's issuer through its store; wait until a JWT is accepted.
    const probe = await jwt()
    for (let i = 0; i < 50; i++) {
      const r = await server.request('/api/v1/me', [...bearer(probe), ...tenant('acme')])
      if (r.status === 200) break
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  })

  after(async () => {
    await server?.close()
  })

  function assertProblem(
    r: { status: number; headers: Record<string, unknown>; json: Record<string, unknown> },
    status: number,
    code: string,
  ) {
    assert.equal(r.status, status, JSON.stringify(r.json))
    assert.equal(r.json.code, code)
    assert.equal(r.json.status, status)
    assert.match(String(r.headers['content-type']), /^application\/problem\+json/)
    assert.equal(typeof r.json.requestId, 'string')
  }

  describe('→ 401 (SPEC §5.3 rules 1, 3, 4, 6, 7; DESIGN rules 2, 4, 8)', () => {
    it('SPEC 5.3 rule 3 / §7 row 1: no Authorization header → 401 missing_authorization, bare challenge', async () => {
      const r = await server.request('/api/v1/me')
      assertProblem(r, 401, 'missing_authorization')
      assert.equal(r.headers['www-authenticate'], 'Bearer realm="tokengate"')
    })

    it('SPEC 5.3 rule 6: anything but exactly "Bearer <token>" → 401 malformed_authorization', async () => {
      // A trailing space is not testable over the wire: HTTP strips whitespace around field
      // values (RFC 9110 §5.5) before any application sees them. The core rejects it
      // (test/core/credentials.test.ts) for callers that hand it unparsed values.
      for (const value of [
        `bearer ${readerPat}`,
        `Bearer  ${readerPat}`,
        `Token ${readerPat}`,
        'Bearer',
        `Bearer\t${readerPat}`,
        `Bearer ${readerPat},${readerPat}`,
      ]) {
        const r = await server.request('/api/v1/me', ['Authorization', value])
        assertProblem(r, 401, 'malformed_authorization')
        assert.match(String(r.headers['www-authenticate']), /error="invalid_request"/)
      }
    })

    it('DESIGN rule 2: two Authorization headers → 401 malformed_authorization, even if both are valid', async () => {
      const r = await server.request('/api/v1/me', [...bearer(readerPat), ...bearer(readerPat)])
      assertProblem(r, 401, 'malformed_authorization')
    })

    it('SPEC 5.3 rule 4 / §7 row 2: invalid token → 401 invalid_token', async () => {
      for (const token of [
        'not-a-jwt',
        'pat_thisisnotavalidpersonalaccesstokenatall',
        'eyJhbGciOiJub25lIn0.e30.',
      ]) {
        const r = await server.request('/api/v1/me', [...bearer(token), ...tenant('acme')])
        assertProblem(r, 401, 'invalid_token')
        assert.match(String(r.headers['www-authenticate']), /error="invalid_token"/)
      }
    })

    it('SPEC 5.3 rule 4 / §7 row 2: expired JWT → 401 token_expired', async () => {
      const now = Math.floor(Date.now() / 1000)
      const expired = await jwt({ iat: now - 3600, exp: now - 600 })
      assertProblem(
        await server.request('/api/v1/me', [...bearer(expired), ...tenant('acme')]),
        401,
        'token_expired',
      )
    })

    it('SPEC 5.3 rule 1 / §7 row 3: JWT without X-Tenant-Id → 401 tenant_header_required', async () => {
      const token = await jwt()
      const r = await server.request('/api/v1/me', bearer(token))
      assertProblem(r, 401, 'tenant_header_required')
      assert.match(String(r.headers['www-authenticate']), /error="invalid_token"/)
    })

    it('SPEC 5.3 rule 1 / §7 row 3: JWT with a wrong X-Tenant-Id → 401 tenant_mismatch (exact, case-sensitive, untrimmed)', async () => {
      const token = await jwt()
      // (Whitespace around the value cannot be tested over the wire: HTTP strips it.)
      for (const value of ['other', 'ACME', 'acme, acme', 'acm', 'acme\u00a0']) {
        assertProblem(
          await server.request('/api/v1/me', [...bearer(token), ...tenant(value)]),
          401,
          'tenant_mismatch',
        )
      }
      const twice = await server.request('/api/v1/me', [
        ...bearer(token),
        ...tenant('acme'),
        ...tenant('acme'),
      ])
      assertProblem(twice, 401, 'tenant_mismatch')
    })

    it('DESIGN rule 4: PAT with an X-Tenant-Id naming another tenant → 401 tenant_mismatch', async () => {
      assertProblem(
        await server.request('/api/v1/me', [...bearer(readerPat), ...tenant('other')]),
        401,
        'tenant_mismatch',
      )
      assert.equal(
        (await server.request('/api/v1/me', [...bearer(readerPat), ...tenant('acme')])).status,
        200,
      )
    })

    it('SPEC 5.3 rule 7: PAT_ in upper case is not a PAT: it is tried as a JWT → 401 invalid_token', async () => {
      const upper = `PAT_${readerPat.slice(4)}`
      assertProblem(
        await server.request('/api/v1/me', [...bearer(upper), ...tenant('acme')]),
        401,
        'invalid_token',
      )
    })

    it('401 is decided before 403: an invalid token on a permissioned route is 401', async () => {
      assertProblem(
        await server.request('/api/v1/audit-events', bearer('pat_0000')),
        401,
        'invalid_token',
      )
    })

    it('DESIGN rule 8: an unknown /api/v1 path is 401 without a token and 404 with one', async () => {
      assertProblem(await server.request('/api/v1/does-not-exist'), 401, 'missing_authorization')
      assertProblem(
        await server.request('/api/v1/does-not-exist', bearer(readerPat)),
        404,
        'not_found',
      )
      assertProblem(await server.request('/api/v1', []), 401, 'missing_authorization')
    })
  })

  describe('→ 403 (SPEC §5.3 rule 5)', () => {
    it('SPEC 5.3 rule 5 / §7 row 4: valid PAT lacking the permission → 403 insufficient_permission', async () => {
      const r = await server.request('/api/v1/tokens', bearer(plainPat))
      assertProblem(r, 403, 'insufficient_permission')
      assert.equal(
        r.headers['www-authenticate'],
        'Bearer realm="tokengate", error="insufficient_scope", scope="tokens:read"',
      )
    })

    it('SPEC 5.3 rule 5 / §7 row 4: valid JWT lacking the permission → 403', async () => {
      const token = await jwt({ permissions: ['tokens:read'] })
      assertProblem(
        await server.request('/api/v1/audit-events', [...bearer(token), ...tenant('acme')]),
        403,
        'insufficient_permission',
      )
    })
  })

  describe('→ 200 (SPEC §5.3 rules 1, 2)', () => {
    it('SPEC 5.3 rule 1: JWT with the right X-Tenant-Id → 200 as that tenant', async () => {
      const token = await jwt({ sub: 'alice' })
      const r = await server.request('/api/v1/me', [...bearer(token), ...tenant('acme')])
      assert.equal(r.status, 200, r.text)
      assert.equal(r.json.tenantId, 'acme')
      assert.equal(r.json.subject, 'alice')
      assert.equal(r.json.tokenType, 'jwt')
    })

    it('SPEC 5.3 rule 2: PAT without X-Tenant-Id → 200', async () => {
      const r = await server.request('/api/v1/me', bearer(readerPat))
      assert.equal(r.status, 200, r.text)
      assert.equal(r.json.tokenType, 'pat')
      assert.equal(r.json.tenantId, 'acme')
    })
  })

  describe('built-in endpoints', () => {
    it('every response carries a request id and HSTS; a safe incoming X-Request-Id is echoed', async () => {
      const r = await server.request('/api/v1/me', ['X-Request-Id', 'trace-123'])
      assert.equal(r.headers['x-request-id'], 'trace-123')
      assert.equal(r.json.requestId, 'trace-123')
      assert.match(String(r.headers['strict-transport-security']), /^max-age=\d+/)
      const hostile = await server.request('/healthz', ['X-Request-Id', 'a b\u00ff'])
      assert.notEqual(hostile.headers['x-request-id'], 'a b\u00ff')
    })

    it('/healthz and /readyz need no token', async () => {
      assert.equal((await server.request('/healthz')).status, 200)
      const ready = await server.request('/readyz')
      assert.equal(ready.status, 200)
      assert.equal((ready.json.checks as Record<string, string>).store, 'ok')
    })

    it('GET /tokens lists the tenant’s PATs only, metadata only, with cursor pagination', async () => {
      for (let i = 0; i < 3; i++) await issuePat('acme')
      const seen: string[] = []
      let cursor: string | null = null
      do {
        const query: string = cursor ? `?limit=2&cursor=${encodeURIComponent(cursor)}` : '?limit=2'
        const r = await server.request(`/api/v1/tokens${query}`, bearer(readerPat))
        assert.equal(r.status, 200, r.text)
        const items = r.json.items as Array<Record<string, unknown>>
        assert.ok(items.length <= 2)
        for (const item of items) {
          assert.equal(item.tenantId, 'acme')
          assert.match(String(item.hint), /^pat_…[A-Za-z0-9]{4}$/)
          assert.equal('tokenHash' in item, false)
          seen.push(String(item.id))
        }
        cursor = r.json.nextCursor as string | null
      } while (cursor)
      assert.equal(new Set(seen).size, seen.length)
      assert.ok(seen.length >= 5)
      assert.ok(seen.includes(plainPatId))
    })

    it('GET /tokens rejects a bad limit or cursor with 400 naming the field', async () => {
      const r = await server.request('/api/v1/tokens?limit=500', bearer(readerPat))
      assertProblem(r, 400, 'validation_failed')
      assert.match(String(r.json.detail), /limit/)
      const c = await server.request('/api/v1/tokens?cursor=bogus', bearer(readerPat))
      assertProblem(c, 400, 'validation_failed')
      assert.match(String(c.json.detail), /cursor/)
    })

    it('GET /tokens/{id} of another tenant is 404, like a missing one', async () => {
      assert.equal(
        (await server.request(`/api/v1/tokens/${plainPatId}`, bearer(readerPat))).status,
        200,
      )
      assertProblem(
        await server.request(`/api/v1/tokens/${plainPatId}`, bearer(otherTenantPat)),
        404,
        'not_found',
      )
      assertProblem(
        await server.request('/api/v1/tokens/tok_missing', bearer(readerPat)),
        404,
        'not_found',
      )
    })

    it('DELETE /tokens/{id} without tokens:revoke is 403, but a PAT may revoke itself', async () => {
      const victim = await issuePat('acme')
      assertProblem(
        await server.request(`/api/v1/tokens/${victim.id}`, bearer(plainPat), 'DELETE'),
        403,
        'insufficient_permission',
      )
      const self = await server.request(
        `/api/v1/tokens/${victim.id}`,
        bearer(victim.token),
        'DELETE',
      )
      assert.equal(self.status, 200, self.text)
      assert.equal(self.json.status, 'revoked')
      assertProblem(await server.request('/api/v1/me', bearer(victim.token)), 401, 'invalid_token')
    })

    it('GET /openapi.json is OpenAPI 3.1 with both security schemes and the tenant header', async () => {
      const r = await server.request('/api/v1/openapi.json', bearer(readerPat))
      assert.equal(r.status, 200)
      assert.equal(r.json.openapi, '3.1.0')
      const components = r.json.components as { securitySchemes: Record<string, unknown> }
      assert.deepEqual(Object.keys(components.securitySchemes).sort(), [
        'bearerJwt',
        'personalAccessToken',
      ])
      const paths = r.json.paths as Record<
        string,
        Record<string, { parameters: Array<{ name: string }> }>
      >
      assert.ok(paths['/api/v1/tokens/{id}']?.delete)
      assert.ok(paths['/api/v1/me']?.get?.parameters.some((p) => p.name === 'X-Tenant-Id'))
    })
  })

  describe('CLI changes reach the running server', () => {
    it('a PAT rotated through the CLI is listed as rotated and refused; its successor works', async () => {
      const old = await issuePat('acme', 'tokens:read')
      const out = await server.cli('pat', 'rotate', old.id, '--json')
      assert.equal(out.code, 0, out.stderr)
      const successor = JSON.parse(out.stdout) as { token: string; id: string }
      tokens.push(successor.token)
      assert.equal((await server.request('/api/v1/me', bearer(successor.token))).status, 200)
      const view = await server.request(`/api/v1/tokens/${old.id}`, bearer(successor.token))
      assert.equal(view.status, 200, view.text)
      assert.equal(view.json.status, 'rotated')
      let status = 200
      for (let i = 0; i < 50 && status === 200; i++) {
        status = (await server.request('/api/v1/me', bearer(old.token))).status
        if (status === 200) await new Promise((resolve) => setTimeout(resolve, 100))
      }
      assert.equal(status, 401)
    })

    it('a PAT revoked through the CLI is rejected by the running server within the cache TTL', async () => {
      const victim = await issuePat('acme')
      assert.equal((await server.request('/api/v1/me', bearer(victim.token))).status, 200)
      assert.equal((await server.cli('pat', 'revoke', victim.id)).code, 0)
      const started = Date.now()
      let status = 200
      while (status === 200 && Date.now() - started < 5000) {
        status = (await server.request('/api/v1/me', bearer(victim.token))).status
        if (status === 200) await new Promise((resolve) => setTimeout(resolve, 100))
      }
      assert.equal(status, 401)
      assert.ok(Date.now() - started < 3500, 'rejected within the 2 s cache TTL (plus polling)')
    })

    it('a disabled tenant’s tokens stop working', async () => {
      const t = await issuePat('other')
      assert.equal((await server.request('/api/v1/me', bearer(t.token))).status, 200)
      assert.equal((await server.cli('tenant', 'disable', 'other')).code, 0)
      let status = 200
      for (let i = 0; i < 50 && status === 200; i++) {
        status = (await server.request('/api/v1/me', bearer(t.token))).status
        if (status === 200) await new Promise((resolve) => setTimeout(resolve, 100))
      }
      assert.equal(status, 401)
      assert.equal((await server.cli('tenant', 'enable', 'other')).code, 0)
    })
  })

  describe('audit and secrecy (runs last: it checks every token used above)', () => {
    it('failed authentications are audited with a fingerprint; a tenant sees its own 403s', async () => {
      const broken = `${readerPat.slice(0, -1)}${readerPat.endsWith('x') ? 'y' : 'x'}`
      // The caller's request id finds the 401's row: the server's fingerprint of a malformed
      // token is keyed by its own process's secret, which a test of the installed bin lacks.
      const brokenId = `e2e-broken-pat-${Date.now()}`
      assertProblem(
        await server.request('/api/v1/me', [...bearer(broken), 'X-Request-Id', brokenId]),
        401,
        'invalid_token',
      )
      assertProblem(
        await server.request('/api/v1/tokens', bearer(plainPat)),
        403,
        'insufficient_permission',
      )
      let events: Array<Record<string, unknown>> = []
      for (let i = 0; i < 20; i++) {
        const r = await server.request('/api/v1/audit-events?limit=200', bearer(readerPat))
        assert.equal(r.status, 200, r.text)
        events = r.json.items as Array<Record<string, unknown>>
        if (events.some((e) => e.type === 'auth.forbidden')) break
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      const forbidden = events.find((e) => e.type === 'auth.forbidden')
      assert.ok(forbidden, 'an auth.forbidden event is listed for the tenant')
      assert.equal(forbidden.outcome, 'insufficient_permission')
      assert.equal(forbidden.clientAddress, '127.0.0.1')
      assert.ok(
        events.some((e) => e.type === 'auth.forbidden' && e.actor === fingerprintToken(plainPat)),
        'the 403 names its caller by the fingerprint of its token',
      )
      assert.ok(
        events.every((e) => e.tenantId === 'acme'),
        'only the caller tenant’s events',
      )

      // A 401 has no trustworthy tenant: it is stored without one, with the token's keyed
      // fingerprint (hmac:, never a prefix of the token's plain SHA-256).
      let rows: Array<{ actor: string | null; outcome: string; tenant_id: string | null }> = []
      for (let i = 0; i < 20; i++) {
        const db = new DatabaseSync(join(server.dataDir, 'tokengate.db'), { readOnly: true })
        rows = db
          .prepare(
            "SELECT actor, outcome, tenant_id FROM audit_events WHERE type = 'auth.failed' AND request_id = ?",
          )
          .all(brokenId) as typeof rows
        db.close()
        if (rows.length > 0) break
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      assert.equal(rows.length, 1, JSON.stringify(rows))
      const [row] = rows
      assert.equal(row?.outcome, 'invalid_token')
      assert.equal(row?.tenant_id, null)
      assert.match(String(row?.actor), /^hmac:[0-9a-f]{8}$/)
      const plain = createHash('sha256').update(broken).digest('hex')
      assert.ok(!plain.startsWith(String(row?.actor).slice(5)), 'not the plain hash')
    })

    it('no log line and no stored row contains any token used in this suite', async () => {
      await new Promise((resolve) => setTimeout(resolve, 300))
      assert.ok(server.logs.length > 20, 'the suite produced log lines')
      assert.ok(
        server.logs.some((l) => l.includes('"auth":"pat_…')),
        'request lines carry fingerprints',
      )
      const store = openSqliteStore(join(server.dataDir, 'tokengate.db'))
      try {
        const audit = await store.listAudit('acme', { limit: 1000 })
        const dump = JSON.stringify(audit.items) + server.logs.join('\n')
        for (const token of tokens) {
          assert.equal(dump.includes(token), false, 'a token leaked into logs or audit')
          assert.equal(dump.includes(token.slice(4, 30)), false, 'part of a token leaked')
        }
      } finally {
        await store.close()
      }
    })
  })
})
