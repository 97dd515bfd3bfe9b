/**
 * The gate hashes a bearer token up front only when something keys by its digest (the
 * failed-authentication limiter, the recorder's refused fingerprints); a bare gate leaves the
 * hashing to the kind that claims the token, so a malformed token costs no SHA-256 (issue #36).
 */
import assert from 'node:assert/strict'
import { hash } from 'node:crypto'
import { describe, it } from 'node:test'
import { createGate } from '../../src/auth/gate.ts'
import type { GateRequest } from '../../src/auth/outcome.ts'
import type { AuthInput, TokenDigest } from '../../src/core/raw-headers.ts'
import { createSpecFixture } from '../adapters/spec-table.ts'
import { recordingGate } from '../helpers/recording-gate.ts'

const TOKEN = 'pat_anything'
const request = (authorization: readonly string[]): GateRequest => ({
  method: 'GET',
  target: '/api/v1/me',
  authorization,
  tenantIds: [],
  clientAddress: '127.0.0.1',
  requestId: 'req-1',
})

/** An authenticate that keeps the digest hint and the request it was given, and refuses. */
function hintRecorder() {
  const hints: (TokenDigest | 'none')[] = []
  const inputs: AuthInput[] = []
  const authenticate = (input: AuthInput, digest?: TokenDigest) => {
    hints.push(digest ?? input.tokenSha256 ?? 'none')
    inputs.push(input)
    return {
      ok: false as const,
      failure: { code: 'invalid_token' as const, reason: 'malformed' as const, detail: 'x' },
    }
  }
  return { hints, inputs, authenticate }
}

describe('gate: the bearer digest up front', () => {
  it('a bare gate (no limiter, no recorder) hands the kinds no digest', () => {
    const { hints, authenticate } = hintRecorder()
    const gate = createGate({ authenticate })
    const outcome = gate.check(request([`Bearer ${TOKEN}`]))
    assert.equal('then' in outcome, false)
    assert.deepEqual(hints, ['none'])
  })

  it('a gate with a recorder computes it once and hands it on beside the request', () => {
    const { hints, inputs, authenticate } = hintRecorder()
    const { gate } = recordingGate(authenticate)
    const checked = request([`Bearer ${TOKEN}`])
    void gate.check(checked)
    assert.deepEqual(hints, [{ token: TOKEN, sha256Hex: hash('sha256', TOKEN, 'hex') }])
    // The request itself, not a copy made to carry the digest.
    assert.equal(inputs[0], checked)
  })

  it('the real kinds decide alike without it: valid, unknown and revoked PATs, garbage', async () => {
    const { authenticate, tokens } = await createSpecFixture()
    const bare = createGate({ authenticate })
    const { gate: recorded } = recordingGate(authenticate)
    const cases = [tokens.pat, tokens.unknownPat, tokens.revokedPat, 'pat_garbage', tokens.jwt]
    for (const token of cases) {
      const [a, b] = [bare, recorded].map((g) => g.check(request([`Bearer ${token}`])))
      const [withoutDigest, withDigest] = [await a, await b]
      assert.deepEqual(withoutDigest, withDigest)
    }
    const ok = await bare.check(request([`Bearer ${tokens.pat}`]))
    assert.equal(ok.allowed, true)
  })
})
