/**
 * The SPEC §5.3 / §7 table (test/spec/cases.ts) against the running server over a real TLS
 * socket, on `GET /api/v1/tokens` (permission `tokens:read`). Its tokens are minted the way
 * an operator mints them: PATs through the CLI (an expired one written straight to the
 * store, since the CLI refuses a past expiry), JWTs from an issuer registered through the CLI.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { issuePat } from '../../src/core/pat.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { createTestIssuer, TEST_TENANT } from '../helpers/jwt.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { addIssuerWithCli } from '../helpers/server-cli.ts'
import { expectedChallenge, SPEC_CASES, type SpecCase, type SpecTokens } from '../spec/cases.ts'

const PATH = '/api/v1/tokens'
const PERMISSION = 'tokens:read'

const byOutcome = (status: SpecCase['status']) => SPEC_CASES.filter((c) => c.status === status)

describe('server over HTTPS: SPEC §5.3 / §7 table', () => {
  let server: TestServer
  let tokens: SpecTokens

  async function cliPat(...permissions: string[]) {
    const out = await server.cli(
      'pat',
      'issue',
      '--tenant',
      TEST_TENANT,
      '--subject',
      'spec',
      ...permissions.flatMap((p) => ['--permission', p]),
      '--json',
    )
    assert.equal(out.code, 0, out.stderr)
    return JSON.parse(out.stdout) as { token: string; id: string }
  }

  before(async () => {
    server = await startTestServer()
    const idp = createTestIssuer()
    const foreign = createTestIssuer({ issuer: 'https://untrusted.test' })
    assert.equal((await server.cli('tenant', 'create', TEST_TENANT)).code, 0)
    await addIssuerWithCli(server, idp)

    const revoked = await cliPat(PERMISSION)
    assert.equal((await server.cli('pat', 'revoke', revoked.id)).code, 0)
    const now = Date.now()
    const expired = issuePat({
      tenantId: TEST_TENANT,
      subject: 'spec',
      name: 'expired',
      permissions: [PERMISSION],
      expiresAt: now - 60_000,
      now: now - 7_200_000,
    })
    const store = openSqliteStore(join(server.dataDir, 'tokengate.db'))
    try {
      await store.insertPat(expired.record)
    } finally {
      await store.close()
    }
    tokens = {
      jwt: await idp.sign({ permissions: [PERMISSION] }),
      jwtWithoutPermission: await idp.sign({ permissions: ['other:read'] }),
      expiredJwt: await idp.sign({}, { nowMs: now - 3_600_000, expiresInSec: 300 }),
      foreignJwt: await foreign.sign({ permissions: [PERMISSION] }),
      pat: (await cliPat(PERMISSION)).token,
      patWithoutPermission: (await cliPat()).token,
      expiredPat: expired.token,
      revokedPat: revoked.token,
      unknownPat: issuePat({
        tenantId: TEST_TENANT,
        subject: 'x',
        name: 'x',
        permissions: [],
        expiresAt: null,
        now,
      }).token,
    }
    // The server learns of the CLI's issuer through its store; wait until a JWT is accepted.
    for (let i = 0; i < 50; i++) {
      const r = await server.request(PATH, send(specCaseNamed(/JWT with its X-Tenant-Id/)))
      if (r.status === 200) break
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  })

  after(async () => {
    await server?.close()
  })

  function specCaseNamed(pattern: RegExp): SpecCase {
    const found = SPEC_CASES.find((c) => pattern.test(c.name))
    assert.ok(found, String(pattern))
    return found
  }

  function send(specCase: SpecCase): string[] {
    return specCase.headers(tokens).flat()
  }

  for (const status of [401, 403] as const) {
    describe(`→ ${status}`, () => {
      for (const specCase of byOutcome(status)) {
        test(specCase.name, async () => {
          const r = await server.request(PATH, send(specCase))
          assert.equal(r.status, specCase.status, r.text)
          assert.equal(r.json.code, specCase.code)
          assert.equal(r.json.status, specCase.status)
          assert.match(String(r.headers['content-type']), /^application\/problem\+json/)
          assert.equal(typeof r.json.requestId, 'string')
          assert.equal(r.headers['x-request-id'], r.json.requestId)
          const challenge = r.headers['www-authenticate']
          const expected = expectedChallenge(specCase, PERMISSION)
          if (typeof expected === 'string') assert.equal(challenge, expected)
          else assert.match(String(challenge), expected as RegExp)
        })
      }
    })
  }

  describe('→ 200', () => {
    for (const specCase of byOutcome(200)) {
      test(specCase.name, async () => {
        const r = await server.request(PATH, send(specCase))
        assert.equal(r.status, 200, r.text)
        assert.equal(r.headers['www-authenticate'], undefined)
        const items = r.json.items as Array<{ tenantId: string }>
        assert.ok(items.length > 0)
        assert.ok(items.every((item) => item.tenantId === TEST_TENANT))
      })
    }
  })
})
