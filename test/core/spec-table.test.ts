/**
 * The SPEC §5.3 / §7 table (test/spec/cases.ts) through the core's own entry point: the
 * raw header lines → readAuthHeaders → authenticate → authorize → failureResponse, with
 * no HTTP in between. The adapters and the server run the same table over the wire.
 */
import assert from 'node:assert/strict'
import { before, describe, test } from 'node:test'
import { authorize } from '../../src/core/authorize.ts'
import { readAuthHeaders } from '../../src/core/raw-headers.ts'
import { failureResponse } from '../../src/http/failure-response.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import {
  createSpecFixture,
  expectedChallenge,
  REQUIRED_PERMISSION,
  SPEC_CASES,
  type SpecCase,
  type SpecFixture,
} from '../spec/cases.ts'

const byOutcome = (status: SpecCase['status']) => SPEC_CASES.filter((c) => c.status === status)

describe('core: SPEC §5.3 / §7 table', () => {
  let fixture: SpecFixture
  before(async () => {
    fixture = await createSpecFixture()
  })

  async function decide(specCase: SpecCase) {
    const lines = specCase.headers(fixture.tokens)
    const result = await fixture.authenticate(readAuthHeaders(lines.flat()))
    const failure = result.ok ? authorize(result.principal, [REQUIRED_PERMISSION]) : result.failure
    return { result, failure }
  }

  for (const status of [401, 403] as const) {
    describe(`→ ${status}`, () => {
      for (const specCase of byOutcome(status)) {
        test(specCase.name, async () => {
          const { failure } = await decide(specCase)
          assert.ok(failure, 'the core must refuse this request')
          const response = failureResponse(failure, 'core')
          assert.equal(response.status, specCase.status)
          assert.equal(response.body.code, specCase.code)
          const challenge = response.headers['www-authenticate']
          const expected = expectedChallenge(specCase, REQUIRED_PERMISSION)
          if (typeof expected === 'string') assert.equal(challenge, expected)
          else assert.match(String(challenge), expected as RegExp)
        })
      }
    })
  }

  describe('→ 200', () => {
    for (const specCase of byOutcome(200)) {
      test(specCase.name, async () => {
        const { result, failure } = await decide(specCase)
        assert.equal(failure, undefined, JSON.stringify(failure))
        assert.ok(result.ok)
        assert.equal(result.principal.tenantId, TEST_TENANT)
      })
    }
  })

  test('every case of the table belongs to one outcome group', () => {
    assert.equal(
      byOutcome(401).length + byOutcome(403).length + byOutcome(200).length,
      SPEC_CASES.length,
    )
  })
})
