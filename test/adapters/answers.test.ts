/**
 * Every answer of a binding is recorded once, through the gate's recorder (the edge's
 * `answered`): allowed and refused by the gate, each with the status that went out and the
 * request id the caller got.
 */
import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import { after, before, describe, test } from 'node:test'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { tokengate as expressGate } from '../../src/adapters/express.ts'
import { tokengate as fastifyGate } from '../../src/adapters/fastify.ts'
import { tokengate as honoGate, type TokengateEnv } from '../../src/adapters/hono.ts'
import { tokengate as nodeGate } from '../../src/adapters/node-http.ts'
import { createGate, type Gate } from '../../src/auth/gate.ts'
import type { Answer, OutcomeRecorder } from '../../src/auth/outcome-recorder.ts'
import type { Authenticate } from '../../src/core/authenticate.ts'
import { listenLocal } from '../helpers/listen.ts'
import { listenHono } from '../helpers/listen-hono.ts'
import { createSpecFixture, PROTECTED_PATH, send } from './spec-table.ts'

function answersGate(authenticate: Authenticate): { gate: Gate; answers: Answer[] } {
  const answers: Answer[] = []
  const recorder: OutcomeRecorder = {
    timesAuthentication: false,
    recordsAnswers: true,
    recordOutcome() {},
    failedAuthLimitReached() {},
    recordAnswer: (answer) => void answers.push(answer),
    recordRefusal() {},
    close: async () => {},
  }
  return { gate: createGate({ authenticate, recorder }), answers }
}

const apps: Record<string, (gate: Gate) => Promise<{ url: string; close(): Promise<void> }>> = {
  async express(gate) {
    const app = express()
    app.use(expressGate({ ...gate, prefix: '/api/v1/' }))
    app.all(PROTECTED_PATH, (_req, res) => res.json({ ok: true }))
    return listenLocal(createServer(app))
  },
  async hono(gate) {
    const app = new Hono<TokengateEnv>()
    app.use('/api/v1/*', honoGate(gate))
    app.all(PROTECTED_PATH, (c) => c.json({ ok: true }))
    return listenHono(app.fetch)
  },
  async 'node:http'(gate) {
    return listenLocal(
      createServer(nodeGate(gate, { prefix: '/api/v1/' }, (_q, res) => res.end('{}'))),
    )
  },
  async fastify(gate) {
    const app = Fastify()
    await app.register(fastifyGate, gate)
    app.all(PROTECTED_PATH, async () => ({ ok: true }))
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    return { url, close: () => app.close() }
  },
}

for (const [name, start] of Object.entries(apps)) {
  describe(`${name}: each answer recorded once`, () => {
    let running: { url: string; close(): Promise<void> }
    let answers: Answer[]
    let pat: string
    before(async () => {
      const fixture = await createSpecFixture()
      pat = fixture.tokens.pat
      const made = answersGate(fixture.authenticate)
      answers = made.answers
      running = await start(made.gate)
    })
    after(() => running?.close())

    test('allowed 200 and refused 401: one answer each, with the status and id sent', async () => {
      const sent = [
        await send(running.url, PROTECTED_PATH, [['Authorization', `Bearer ${pat}`]]),
        await send(running.url, PROTECTED_PATH, []),
      ]
      assert.deepEqual(
        sent.map((r) => r.status),
        [200, 401],
      )
      // Recorded once the response is finished: give the finish event a turn.
      await new Promise((resolve) => setTimeout(resolve, 50))
      assert.deepEqual(
        answers.map((a) => [a.status, a.requestId, a.outcome?.allowed]),
        sent.map((r, i) => [r.status, r.headers['x-request-id'], i === 0]),
      )
    })
  })
}
