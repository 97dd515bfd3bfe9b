/**
 * The SPEC §5.3 / §7 table, run unchanged against every entry point (the Fastify plugin,
 * Express, Hono, node:http). Each adapter test starts an app on 127.0.0.1:0 that protects
 * `GET /api/v1/things` with the permission `things:read` and answers 200 with
 * `{ tenantId, subject }`, then calls `runSpecTable`.
 *
 * Every failing case checks status, problem `code` and `WWW-Authenticate`, and that the
 * whole response (body without `requestId`, and the relevant headers) is exactly what
 * `failureResponse` makes of the core's own verdict for the same headers: the adapters must
 * not have a mapping of their own.
 */
import assert from 'node:assert/strict'
import { request as httpRequest } from 'node:http'
import { after, before, describe, test } from 'node:test'
import { type Authenticate, createAuthenticator } from '../../src/core/authenticate.ts'
import { authorize } from '../../src/core/authorize.ts'
import type { IssuerConfig } from '../../src/core/issuer.ts'
import { createJwtVerifier } from '../../src/core/jwt.ts'
import { issuePat } from '../../src/core/pat.ts'
import { type PatRecord, systemClock } from '../../src/core/ports.ts'
import { readAuthHeaders } from '../../src/core/raw-headers.ts'
import { failureResponse } from '../../src/http/failure-response.ts'
import { addTenant, fakeLookups } from '../helpers/core-fakes.ts'
import { createTestIssuer, TEST_TENANT } from '../helpers/jwt.ts'

export const REQUIRED_PERMISSION = 'things:read'
export const PROTECTED_PATH = '/api/v1/things'

export interface SpecFixture {
  readonly authenticate: Authenticate
  /** The trusted issuer and the stored PATs, for an app that loads them into a real store. */
  readonly issuer: IssuerConfig
  readonly pats: readonly PatRecord[]
  readonly tokens: {
    readonly jwt: string
    readonly jwtWithoutPermission: string
    readonly expiredJwt: string
    readonly foreignJwt: string
    readonly pat: string
    readonly patWithoutPermission: string
    readonly expiredPat: string
    readonly revokedPat: string
    readonly unknownPat: string
  }
}

/** A real authenticator: real JWTs from a test issuer, real PATs in in-memory lookups. */
export async function createSpecFixture(): Promise<SpecFixture> {
  const issuer = createTestIssuer()
  const foreign = createTestIssuer({ issuer: 'https://untrusted.test' })
  const lookups = fakeLookups()
  addTenant(lookups, TEST_TENANT)
  const now = Date.now()
  const pat = (permissions: string[], patch: { expiresAt?: number; revokedAt?: number } = {}) => {
    const issued = issuePat({
      tenantId: TEST_TENANT,
      subject: 'ci-bot',
      name: 'spec',
      permissions,
      expiresAt: now + 3_600_000,
      now: now - 7_200_000,
    })
    lookups.pats.set(issued.record.tokenHash, { ...issued.record, ...patch })
    return issued.token
  }
  const authenticate = createAuthenticator({
    lookups,
    jwt: createJwtVerifier([issuer.config]),
    clock: systemClock,
  })
  const tokens = {
    jwt: await issuer.sign({ permissions: [REQUIRED_PERMISSION] }),
    jwtWithoutPermission: await issuer.sign({ permissions: ['other:read'] }),
    expiredJwt: await issuer.sign({}, { nowMs: now - 3_600_000, expiresInSec: 300 }),
    foreignJwt: await foreign.sign({ permissions: [REQUIRED_PERMISSION] }),
    pat: pat([REQUIRED_PERMISSION]),
    patWithoutPermission: pat([]),
    expiredPat: pat([REQUIRED_PERMISSION], { expiresAt: now - 60_000 }),
    revokedPat: pat([REQUIRED_PERMISSION], { revokedAt: now - 60_000 }),
    unknownPat: issuePat({
      tenantId: TEST_TENANT,
      subject: 'x',
      name: 'x',
      permissions: [],
      expiresAt: null,
      now,
    }).token,
  }
  return { authenticate, issuer: issuer.config, pats: [...lookups.pats.values()], tokens }
}

type Tokens = SpecFixture['tokens']

export interface SpecCase {
  readonly name: string
  /** Header lines, sent exactly (duplicates included). */
  readonly headers: (tokens: Tokens) => [string, string][]
  readonly status: 200 | 401 | 403
  readonly code?: string
  /** Exact value, a pattern, or undefined for 200. */
  readonly challenge?: string | RegExp
}

const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`]
const tenant = (id: string): [string, string] => ['X-Tenant-Id', id]
const INVALID_TOKEN =
  /^Bearer realm="tokengate", error="invalid_token", error_description="(?:[^"\\]|\\.)+"$/
const INVALID_REQUEST =
  /^Bearer realm="tokengate", error="invalid_request", error_description="(?:[^"\\]|\\.)+"$/

/** SPEC §5.3 rules 1–7 and every row of §7, plus DESIGN's header-format rules. */
export const SPEC_CASES: readonly SpecCase[] = [
  {
    name: 'no Authorization header → 401 missing_authorization, bare challenge',
    headers: () => [],
    status: 401,
    code: 'missing_authorization',
    challenge: 'Bearer realm="tokengate"',
  },
  {
    name: 'lower-case scheme → 401 malformed_authorization',
    headers: (t) => [['Authorization', `bearer ${t.jwt}`], tenant(TEST_TENANT)],
    status: 401,
    code: 'malformed_authorization',
    challenge: INVALID_REQUEST,
  },
  {
    name: 'another scheme → 401 malformed_authorization',
    headers: () => [['Authorization', 'Basic dXNlcjpwYXNz']],
    status: 401,
    code: 'malformed_authorization',
    challenge: INVALID_REQUEST,
  },
  {
    name: 'two spaces after Bearer → 401 malformed_authorization',
    headers: (t) => [['Authorization', `Bearer  ${t.pat}`]],
    status: 401,
    code: 'malformed_authorization',
    challenge: INVALID_REQUEST,
  },
  {
    name: 'two Authorization headers → 401 malformed_authorization',
    headers: (t) => [bearer(t.pat), bearer(t.pat)],
    status: 401,
    code: 'malformed_authorization',
    challenge: INVALID_REQUEST,
  },
  {
    name: 'garbage token → 401 invalid_token',
    headers: () => [bearer('not-a-jwt'), tenant(TEST_TENANT)],
    status: 401,
    code: 'invalid_token',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'JWT from an untrusted issuer → 401 invalid_token',
    headers: (t) => [bearer(t.foreignJwt), tenant(TEST_TENANT)],
    status: 401,
    code: 'invalid_token',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'expired JWT → 401 token_expired',
    headers: (t) => [bearer(t.expiredJwt), tenant(TEST_TENANT)],
    status: 401,
    code: 'token_expired',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'unknown PAT → 401 invalid_token',
    headers: (t) => [bearer(t.unknownPat)],
    status: 401,
    code: 'invalid_token',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'PAT with a bad checksum → 401 invalid_token',
    headers: (t) => [bearer(`${t.pat.slice(0, -1)}${t.pat.endsWith('A') ? 'B' : 'A'}`)],
    status: 401,
    code: 'invalid_token',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'expired PAT → 401 token_expired',
    headers: (t) => [bearer(t.expiredPat)],
    status: 401,
    code: 'token_expired',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'revoked PAT → 401 invalid_token',
    headers: (t) => [bearer(t.revokedPat)],
    status: 401,
    code: 'invalid_token',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'JWT without X-Tenant-Id → 401 tenant_header_required',
    headers: (t) => [bearer(t.jwt)],
    status: 401,
    code: 'tenant_header_required',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'JWT with a wrong X-Tenant-Id → 401 tenant_mismatch',
    headers: (t) => [bearer(t.jwt), tenant('tenant-b')],
    status: 401,
    code: 'tenant_mismatch',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'JWT with X-Tenant-Id in another case → 401 tenant_mismatch',
    headers: (t) => [bearer(t.jwt), tenant(TEST_TENANT.toUpperCase())],
    status: 401,
    code: 'tenant_mismatch',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'JWT with two X-Tenant-Id headers → 401 tenant_mismatch',
    headers: (t) => [bearer(t.jwt), tenant(TEST_TENANT), tenant(TEST_TENANT)],
    status: 401,
    code: 'tenant_mismatch',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'PAT with a wrong X-Tenant-Id → 401 tenant_mismatch',
    headers: (t) => [bearer(t.pat), tenant('tenant-b')],
    status: 401,
    code: 'tenant_mismatch',
    challenge: INVALID_TOKEN,
  },
  {
    name: 'JWT lacking the permission → 403 insufficient_permission',
    headers: (t) => [bearer(t.jwtWithoutPermission), tenant(TEST_TENANT)],
    status: 403,
    code: 'insufficient_permission',
    challenge: `Bearer realm="tokengate", error="insufficient_scope", scope="${REQUIRED_PERMISSION}"`,
  },
  {
    name: 'PAT lacking the permission → 403 insufficient_permission',
    headers: (t) => [bearer(t.patWithoutPermission)],
    status: 403,
    code: 'insufficient_permission',
    challenge: `Bearer realm="tokengate", error="insufficient_scope", scope="${REQUIRED_PERMISSION}"`,
  },
  {
    name: 'JWT with its X-Tenant-Id and the permission → 200',
    headers: (t) => [bearer(t.jwt), tenant(TEST_TENANT)],
    status: 200,
  },
  {
    name: 'PAT without X-Tenant-Id → 200',
    headers: (t) => [bearer(t.pat)],
    status: 200,
  },
  {
    name: 'PAT with its own X-Tenant-Id → 200',
    headers: (t) => [bearer(t.pat), tenant(TEST_TENANT)],
    status: 200,
  },
]

/** A running app under test. */
export interface AppUnderTest {
  readonly url: string
  close(): Promise<void>
}

/**
 * Registers one `describe` running every case of `SPEC_CASES` against the app `start`
 * builds around the fixture's `authenticate`.
 */
export function runSpecTable(
  adapter: string,
  start: (authenticate: Authenticate, fixture: SpecFixture) => Promise<AppUnderTest>,
): void {
  describe(`${adapter}: SPEC §5.3 / §7 table`, () => {
    let fixture: SpecFixture
    let app: AppUnderTest
    before(async () => {
      fixture = await createSpecFixture()
      app = await start(fixture.authenticate, fixture)
    })
    after(() => app?.close())

    for (const specCase of SPEC_CASES) {
      test(specCase.name, async () => {
        const lines = specCase.headers(fixture.tokens)
        const response = await send(app.url, PROTECTED_PATH, lines)
        assert.equal(response.status, specCase.status)
        if (specCase.status === 200) {
          const body = JSON.parse(response.body) as { tenantId: string }
          assert.equal(body.tenantId, TEST_TENANT)
          assert.equal(response.headers['www-authenticate'], undefined)
          return
        }
        const body = JSON.parse(response.body) as Record<string, unknown>
        assert.equal(body.code, specCase.code)
        const challenge = response.headers['www-authenticate']
        if (typeof specCase.challenge === 'string') assert.equal(challenge, specCase.challenge)
        else assert.match(String(challenge), specCase.challenge as RegExp)

        // Exactly the core's own verdict, through the one wire mapping.
        const expected = await expectedResponse(fixture.authenticate, lines)
        const { requestId, ...rest } = body
        const { requestId: _ignored, ...expectedRest } = expected.body
        assert.deepEqual(rest, expectedRest)
        assert.equal(typeof requestId, 'string')
        assert.equal(response.headers['x-request-id'], requestId)
        assert.equal(response.headers['content-type'], 'application/problem+json; charset=utf-8')
        for (const [name, value] of Object.entries(expected.headers)) {
          if (name === 'content-type') continue
          assert.equal(response.headers[name], value, name)
        }
      })
    }
  })
}

async function expectedResponse(authenticate: Authenticate, lines: [string, string][]) {
  const result = await authenticate(readAuthHeaders(lines.flat()))
  const failure = result.ok ? authorize(result.principal, [REQUIRED_PERMISSION]) : result.failure
  assert.ok(failure, 'the core itself must refuse this request')
  return failureResponse(failure, 'expected')
}

interface RawResponse {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly body: string
}

/** A GET with exactly these header lines (fetch would merge duplicates). */
export function send(base: string, path: string, lines: [string, string][]): Promise<RawResponse> {
  const url = new URL(base)
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path,
        method: 'GET',
        headers: [['Host', url.host], ...lines].flat(),
      },
      (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => {
          body += chunk
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
      },
    )
    req.on('error', reject)
    req.end()
  })
}
