/**
 * A library app keeps a caller's X-Request-Id under the server's one rule (http/request-id.ts):
 * 1–64 safe characters and never token-shaped. The id is echoed in the response, the problem
 * body and every log line and audit event, so a token sent there must be replaced.
 */
import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import { after, before, describe, test } from 'node:test'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import {
  tokengate as expressGate,
  requirePermission as expressPermission,
} from '../../src/adapters/express.ts'
import { tokengate as fastifyGate } from '../../src/adapters/fastify.ts'
import { tokengate as honoGate, type TokengateEnv } from '../../src/adapters/hono.ts'
import type { Authenticate } from '../../src/core/authenticate.ts'
import { listenLocal } from '../helpers/listen.ts'
import { listenHono } from '../helpers/listen-hono.ts'
import {
  type AppUnderTest,
  createSpecFixture,
  PROTECTED_PATH,
  REQUIRED_PERMISSION,
  type SpecFixture,
  send,
} from './spec-table.ts'

const apps: Record<string, (authenticate: Authenticate) => Promise<AppUnderTest>> = {
  async express(authenticate) {
    const app = express()
    app.use(expressGate({ authenticate, prefix: '/api/v1/' }))
    app.get(PROTECTED_PATH, expressPermission(REQUIRED_PERMISSION), (_req, res) => {
      res.json({ ok: true })
    })
    return listenLocal(createServer(app))
  },
  async hono(authenticate) {
    const app = new Hono<TokengateEnv>()
    app.use('/api/v1/*', honoGate({ authenticate }))
    app.get(PROTECTED_PATH, (c) => c.json({ ok: true }))
    return listenHono(app.fetch)
  },
  async 'fastify (tokengate/fastify)'(authenticate) {
    const app = Fastify()
    await app.register(fastifyGate, { authenticate })
    app.get(PROTECTED_PATH, async () => ({ ok: true }))
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    return { url, close: () => app.close() }
  },
}

for (const [name, start] of Object.entries(apps)) {
  describe(`${name}: the one request-id rule`, () => {
    let fixture: SpecFixture
    let app: AppUnderTest
    before(async () => {
      fixture = await createSpecFixture()
      app = await start(fixture.authenticate)
    })
    after(() => app?.close())

    test('a PAT sent as X-Request-Id is replaced, on a 200 and on a 401', async () => {
      for (const token of [fixture.tokens.pat, 'not-a-token']) {
        const response = await send(app.url, PROTECTED_PATH, [
          ['Authorization', `Bearer ${token}`],
          ['X-Request-Id', fixture.tokens.unknownPat],
        ])
        assert.ok(response.status === 200 || response.status === 401)
        assert.notEqual(response.headers['x-request-id'], fixture.tokens.unknownPat)
        assert.doesNotMatch(response.body, /pat_/)
      }
    })

    test('a safe id of 64 characters is kept; 65 are replaced', async () => {
      const kept = 'a'.repeat(64)
      const ok = await send(app.url, PROTECTED_PATH, [
        ['Authorization', `Bearer ${fixture.tokens.pat}`],
        ['X-Request-Id', kept],
      ])
      assert.equal(ok.headers['x-request-id'], kept)
      const long = await send(app.url, PROTECTED_PATH, [['X-Request-Id', `${kept}a`]])
      assert.equal(long.status, 401)
      assert.notEqual(long.headers['x-request-id'], `${kept}a`)
      assert.equal(JSON.parse(long.body).requestId, long.headers['x-request-id'])
    })
  })
}
