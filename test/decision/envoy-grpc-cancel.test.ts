/**
 * A Check that Envoy cancels (its own timeout, or the client it asked for went away) while
 * tokengate still decides: a real grpc-js client cancels the call on the real gRPC listener,
 * and the decision's span ends at once as aborted, as the HTTP decision listener's does when
 * the proxy hangs up, and no answer is recorded for it (none went out). The decision is held
 * by the test, so the cancel always comes first.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import * as grpc from '@grpc/grpc-js'
import { createEdge } from '../../src/auth/edge.ts'
import { createGate } from '../../src/auth/gate.ts'
import type { RequestSpan, RequestTracing } from '../../src/auth/request-span.ts'
import type { Answer, Decider } from '../../src/decision/decide.ts'
import { type EnvoyGrpc, startEnvoyGrpc } from '../../src/decision/envoy-grpc.ts'
import { problemResponse } from '../../src/http/problem-response.ts'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { answerRecorder } from '../helpers/answer-recorder.ts'
import { checkRequest } from './envoy-check-requests.ts'
import { connectEnvoyAuthorization, type EnvoyAuthorization } from './envoy-client.ts'

/** Each span the listener started: every `end` (its status) or `abort` that reached it. */
const spans: { status?: number; aborted: boolean }[][] = []
const tracing: RequestTracing = {
  start(): RequestSpan {
    const ends: { status?: number; aborted: boolean }[] = []
    spans.push(ends)
    return {
      run: (work) => work(),
      end: (status) => void ends.push({ status, aborted: false }),
      abort: () => void ends.push({ aborted: true }),
    }
  },
}

const { recorder, answers } = answerRecorder()

/** Decisions asked and not yet answered: the test answers each when it chooses. */
const waiting: ((answer: Answer) => void)[] = []
const decide: Decider = () => ({
  method: 'GET',
  target: PROTECTED_PATH,
  answer: new Promise<Answer>((resolve) => waiting.push(resolve)),
})
const refusal: Answer = {
  type: 'refuse',
  outcome: undefined,
  response: problemResponse('not_found', 'No such endpoint.', 'r-1'),
}

async function until(condition: () => boolean, ms = 2000): Promise<void> {
  for (const stop = Date.now() + ms; !condition() && Date.now() < stop; ) await sleep(5)
}

describe('Envoy gRPC ext_authz: a Check that Envoy cancels', () => {
  let listener: EnvoyGrpc
  let envoy: EnvoyAuthorization<{ http_response: string }>
  before(async () => {
    // The decider below is the test's: the gate only gives the edge its tracing and recorder.
    const authenticate = async (): Promise<never> => {
      throw new Error('not asked')
    }
    const gate = createGate({ authenticate, tracing, recorder })
    listener = await startEnvoyGrpc({
      host: '127.0.0.1',
      port: 0,
      decide,
      trusted: () => 'envoy',
      recorder,
      edge: createEdge(gate, { listener: 'decision' }),
      logger: { error() {} },
      diagnostics: { warn() {} },
    })
    envoy = connectEnvoyAuthorization(listener.url)
  })
  after(async () => {
    envoy?.close()
    await listener?.close()
  })

  const reset = () => {
    spans.length = 0
    answers.length = 0
    waiting.length = 0
  }

  test('answered: the span ends with the status, the answer is recorded', async () => {
    reset()
    const asked = envoy.check(checkRequest('GET', PROTECTED_PATH, []))
    await until(() => waiting.length > 0)
    waiting[0]?.(refusal)
    assert.equal((await asked).http_response, 'denied_response')
    await until(() => answers.length > 0)
    assert.deepEqual(spans, [[{ status: 404, aborted: false }]])
    assert.deepEqual(
      answers.map((a) => [a.listener, a.status]),
      [['decision', 404]],
    )
  })

  test('cancelled while the decision is held: the span ends at once as aborted; the late answer records nothing', async () => {
    reset()
    const cancel = new AbortController()
    const asked = envoy.check(checkRequest('GET', PROTECTED_PATH, []), cancel.signal)
    await until(() => waiting.length > 0)
    assert.equal(spans.length, 1, 'one decision span, started')
    cancel.abort()
    await assert.rejects(asked, { code: grpc.status.CANCELLED })
    const [span] = spans as [(typeof spans)[number]]
    await until(() => span.length > 0)
    assert.deepEqual(span, [{ aborted: true }], 'aborted while the decision is still held')
    // The decision finishes after all: the call is gone, so nothing more is ended or recorded.
    waiting[0]?.(refusal)
    await sleep(100)
    assert.deepEqual(span, [{ aborted: true }], 'ended once')
    assert.deepEqual(answers, [], 'no answer went out, none is recorded')
  })
})
