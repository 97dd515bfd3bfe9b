/**
 * The one preflight rule (DESIGN "Browsers", #33): a CORS preflight under the gated prefix
 * is never authenticated — answered 204 (`preflight: 'answer'`, the default) or handed to the
 * app (`'pass'`) — and one outside the prefix is the app's, in every binding.
 */
import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import { describe, test } from 'node:test'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { tokengate as expressGate } from '../../src/adapters/express.ts'
import { tokengate as fastifyGate } from '../../src/adapters/fastify.ts'
import { tokengate as honoGate, type TokengateEnv } from '../../src/adapters/hono.ts'
import { checkRequest, isPreflightRequest, requestIdOf } from '../../src/adapters/node-http.ts'
import type { AuthenticateMaybeSync } from '../../src/core/authenticate.ts'
import { listenLocal } from '../helpers/listen.ts'
import { listenHono } from '../helpers/listen-hono.ts'
import { send } from './spec-table.ts'

const PREFLIGHT: [string, string][] = [
  ['Origin', 'https://app.example'],
  ['Access-Control-Request-Method', 'GET'],
  ['Access-Control-Request-Headers', 'authorization'],
]
const never: AuthenticateMaybeSync = () => assert.fail('a preflight is never authenticated')

function sendOptions(base: string, path: string) {
  return send(base, path, PREFLIGHT, 'OPTIONS')
}

describe('one preflight rule in every binding', () => {
  test('fastify: 204 under the prefix without authentication; outside it the app answers', async () => {
    const app = Fastify()
    await app.register(fastifyGate, { authenticate: never, prefix: '/api/v1/' })
    app.options('/app/thing', async (_request, reply) => reply.code(200).send('app cors'))
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    try {
      assert.equal((await sendOptions(url, '/api/v1/things')).status, 204)
      const outside = await sendOptions(url, '/app/thing')
      assert.equal(outside.status, 200, 'the app answers its own preflight outside the prefix')
      assert.equal(outside.body, 'app cors')
    } finally {
      await app.close()
    }
  })

  test("fastify: preflight 'pass' hands it to the app's route", async () => {
    const app = Fastify()
    await app.register(fastifyGate, { authenticate: never, preflight: 'pass' })
    app.options('/api/v1/things', async (_request, reply) => reply.code(200).send('app cors'))
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    try {
      assert.equal((await sendOptions(url, '/api/v1/things')).status, 200)
    } finally {
      await app.close()
    }
  })

  test('express: 204 under the prefix without authentication (was 401); pass hands it on', async () => {
    const app = express()
    app.use(expressGate({ authenticate: never, prefix: '/api/v1/' }))
    const running = await listenLocal(createServer(app))
    const passing = express()
    passing.use(expressGate({ authenticate: never, prefix: '/api/v1/', preflight: 'pass' }))
    passing.options('/api/v1/things', (_req, res) => {
      res.status(200).send('app cors')
    })
    const passRunning = await listenLocal(createServer(passing))
    try {
      assert.equal((await sendOptions(running.url, '/api/v1/things')).status, 204)
      assert.equal((await sendOptions(passRunning.url, '/api/v1/things')).status, 200)
    } finally {
      await running.close()
      await passRunning.close()
    }
  })

  test('hono: 204 under the mount without authentication (was 401)', async () => {
    const app = new Hono<TokengateEnv>()
    app.use('/api/v1/*', honoGate({ authenticate: never }))
    app.get('/api/v1/things', (c) => c.text('x'))
    const running = await listenHono(app.fetch)
    try {
      assert.equal((await sendOptions(running.url, '/api/v1/things')).status, 204)
    } finally {
      await running.close()
    }
  })

  test('node:http: isPreflightRequest tells it apart; checkRequest is never reached for it', async () => {
    const running = await listenLocal(
      createServer(async (req, res) => {
        if (isPreflightRequest(req)) return void res.writeHead(204).end()
        const outcome = await checkRequest(
          req,
          { authenticate: never },
          { requestId: requestIdOf(req) },
        )
        res.writeHead(outcome.allowed ? 200 : outcome.status).end()
      }),
    )
    try {
      assert.equal((await sendOptions(running.url, '/api/v1/things')).status, 204)
    } finally {
      await running.close()
    }
  })
})
