/**
 * The SPEC §5.3 / §7 table (test/spec/cases.ts), run unchanged against every adapter entry
 * point (the Fastify plugin, Express, Hono, node:http). Each adapter test starts an app on 127.0.0.1:0 that protects
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
import type { Authenticate } from '../../src/core/authenticate.ts'
import { authorize } from '../../src/core/authorize.ts'
import { readAuthHeaders } from '../../src/core/raw-headers.ts'
import { failureResponse } from '../../src/http/failure-response.ts'
import { ONE_METHOD_FAILURE } from '../../src/http/one-method.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import {
  createSpecFixture,
  expectedChallenge,
  PROTECTED_PATH,
  REQUIRED_PERMISSION,
  SPEC_CASES,
  type SpecFixture,
} from '../spec/cases.ts'

export {
  createSpecFixture,
  PROTECTED_PATH,
  REQUIRED_PERMISSION,
  SPEC_CASES,
  type SpecCase,
  type SpecFixture,
} from '../spec/cases.ts'

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

    // RFC 6750 §2 (not a SPEC row): the server refuses a token sent in two ways, so an
    // upstream that also reads `access_token` never acts on a copy nobody checked.
    test('a valid PAT also sent as ?access_token → 400 invalid_request, as the server answers', async () => {
      const lines: [string, string][] = [['Authorization', `Bearer ${fixture.tokens.pat}`]]
      const response = await send(app.url, `${PROTECTED_PATH}?access_token=other`, lines)
      assert.equal(response.status, 400)
      const { requestId, ...rest } = JSON.parse(response.body) as Record<string, unknown>
      const { requestId: _ignored, ...expected } = failureResponse(ONE_METHOD_FAILURE, 'x').body
      assert.deepEqual(rest, expected)
      assert.equal(response.headers['x-request-id'], requestId)
      assert.equal(
        response.headers['www-authenticate'],
        failureResponse(ONE_METHOD_FAILURE, 'x').headers['www-authenticate'],
      )
      assert.equal(response.headers['cache-control'], 'no-store')
    })

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
        const expectedValue = expectedChallenge(specCase, REQUIRED_PERMISSION)
        if (typeof expectedValue === 'string') assert.equal(challenge, expectedValue)
        else assert.match(String(challenge), expectedValue as RegExp)

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

/** A GET (or `method`) with exactly these header lines (fetch would merge duplicates). */
export function send(
  base: string,
  path: string,
  lines: [string, string][],
  method = 'GET',
): Promise<RawResponse> {
  const url = new URL(base)
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path,
        method,
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
