/**
 * Every answer of a binding is recorded once, through the gate's recorder (the edge's
 * `answered`): allowed and refused by the gate, each with the status that went out and the
 * request id the caller got. An answer is recorded when it has been sent in full: a client
 * that goes away first (mid-answer, or while the gate still checks) leaves no answer
 * recorded, the same in all four bindings.
 */
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type IncomingMessage } from 'node:http'
import { connect } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { tokengate as expressGate } from '../../src/adapters/express.ts'
import { tokengate as fastifyGate } from '../../src/adapters/fastify.ts'
import { tokengate as honoGate, type TokengateEnv } from '../../src/adapters/hono.ts'
import { tokengate as nodeGate } from '../../src/adapters/node-http.ts'
import { createGate, type Gate } from '../../src/auth/gate.ts'
import type { Answer } from '../../src/auth/outcome-recorder.ts'
import type { Authenticate } from '../../src/core/authenticate.ts'
import { answerRecorder } from '../helpers/answer-recorder.ts'
import { listenLocal } from '../helpers/listen.ts'
import { listenHono } from '../helpers/listen-hono.ts'
import { createSpecFixture, PROTECTED_PATH, send } from './spec-table.ts'

function answersGate(authenticate: Authenticate): { gate: Gate; answers: Answer[] } {
  const { recorder, answers } = answerRecorder()
  return { gate: createGate({ authenticate, recorder }), answers }
}

/** A route whose handler answers only once its client has gone away. */
const HANGS = '/api/v1/hangs'
/** Requests in a HANGS handler (Hono writes nothing before its handler returns). */
let hanging = 0

/** Until the request's connection is gone (the client closed it). */
const closed = (req: IncomingMessage) => {
  hanging++
  return req.socket.destroyed ? Promise.resolve() : once(req.socket, 'close').then(() => undefined)
}

type Running = { url: string; port: number; close(): Promise<void> }

const apps: Record<string, (gate: Gate) => Promise<Running>> = {
  async express(gate) {
    const app = express()
    app.use(expressGate({ ...gate, prefix: '/api/v1/' }))
    app.get(HANGS, async (req, res) => {
      await closed(req)
      res.json({ late: true })
    })
    app.all(PROTECTED_PATH, (_req, res) => res.json({ ok: true }))
    return listenLocal(createServer(app))
  },
  async hono(gate) {
    const app = new Hono<TokengateEnv>()
    app.use('/api/v1/*', honoGate(gate))
    app.get(HANGS, async (c) => {
      await closed((c.env as { incoming: IncomingMessage }).incoming)
      return c.json({ late: true })
    })
    app.all(PROTECTED_PATH, (c) => c.json({ ok: true }))
    return listenHono(app.fetch)
  },
  async 'node:http'(gate) {
    return listenLocal(
      createServer(
        nodeGate(gate, { prefix: '/api/v1/' }, (req, res) => {
          if (req.url === HANGS) return void closed(req).then(() => res.end('{}'))
          res.end('{}')
        }),
      ),
    )
  },
  async fastify(gate) {
    const app = Fastify()
    await app.register(fastifyGate, gate)
    app.get(HANGS, async (request) => {
      await closed(request.raw)
      return { late: true }
    })
    app.all(PROTECTED_PATH, async () => ({ ok: true }))
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    return { url, port: Number(new URL(url).port), close: () => app.close() }
  },
}

/** Sends `head` on a raw connection, waits until `ready`, then closes it without reading on. */
async function abortWhen(port: number, head: string, ready: () => boolean): Promise<void> {
  const socket = connect(port, '127.0.0.1')
  await once(socket, 'connect')
  socket.write(head)
  while (!ready()) await sleep(5)
  socket.destroy()
}

for (const [name, start] of Object.entries(apps)) {
  describe(`${name}: each answer recorded once`, () => {
    let running: Running
    let answers: Answer[]
    let pat: string
    /** The authenticator waits for this when set (a check still running). */
    let held: Promise<void> | undefined
    let checking = 0
    before(async () => {
      const fixture = await createSpecFixture()
      pat = fixture.tokens.pat
      const made = answersGate(async (input) => {
        checking++
        await held
        return fixture.authenticate(input)
      })
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

    const get = (path: string) =>
      `GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${pat}\r\n\r\n`

    test('the client goes away before the answer is sent: no answer recorded', async () => {
      answers.length = 0
      hanging = 0
      await abortWhen(running.port, get(HANGS), () => hanging > 0)
      // The handler answers once the connection is gone; give that answer time to be recorded.
      await sleep(100)
      assert.ok(hanging > 0)
      assert.deepEqual(
        answers.map((a) => [a.status, a.target]),
        [],
        'an answer nobody received is not recorded',
      )
    })

    test('the client goes away while the gate still checks: no answer recorded', async () => {
      answers.length = 0
      checking = 0
      let release = () => {}
      held = new Promise((resolve) => {
        release = resolve
      })
      try {
        await abortWhen(running.port, get(PROTECTED_PATH), () => checking > 0)
        await sleep(50)
      } finally {
        release()
        held = undefined
      }
      await sleep(100)
      assert.deepEqual(
        answers.map((a) => [a.status, a.target]),
        [],
        'an answer nobody received is not recorded',
      )
    })
  })
}
