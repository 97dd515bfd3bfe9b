import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import { test } from 'node:test'
import express from 'express'
import { requirePermission, tokengate } from '../../src/adapters/express.ts'
import { listenLocal } from '../helpers/listen.ts'
import { recordingGate } from '../helpers/recording-gate.ts'
import {
  createSpecFixture,
  PROTECTED_PATH,
  REQUIRED_PERMISSION,
  runSpecTable,
  send,
} from './spec-table.ts'

const listen = (app: express.Express) => listenLocal(createServer(app))

runSpecTable('express', async (authenticate) => {
  const app = express()
  app.use(tokengate({ authenticate, prefix: '/api/v1/' }))
  app.get(PROTECTED_PATH, requirePermission(REQUIRED_PERMISSION), (req, res) => {
    res.json({ tenantId: req.principal?.tenantId, subject: req.principal?.subject })
  })
  return listen(app)
})

test('express: paths outside the prefix are not authenticated', async () => {
  const app = express()
  app.use(tokengate({ authenticate: () => assert.fail('must not authenticate'), prefix: '/api/' }))
  app.get('/healthz', (_req, res) => {
    res.send('ok')
  })
  const running = await listen(app)
  try {
    const response = await send(running.url, '/healthz', [])
    assert.equal(response.status, 200)
  } finally {
    await running.close()
  }
})

test('express: requirePermission without tokengate() fails closed (500)', async () => {
  const app = express()
  app.get('/x', requirePermission('a'), (_req, res) => {
    res.send('reached')
  })
  app.use(
    (_error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).send('error')
    },
  )
  const running = await listen(app)
  try {
    const response = await send(running.url, '/x', [])
    assert.equal(response.status, 500)
    assert.notEqual(response.body, 'reached')
  } finally {
    await running.close()
  }
})

test("express: a 403 from requirePermission reaches the gate's recorder (audited like every refusal)", async () => {
  const fixture = await createSpecFixture()
  const { gate, recorded } = recordingGate(fixture.authenticate)
  const app = express()
  app.use(tokengate(gate))
  app.get(PROTECTED_PATH, requirePermission(REQUIRED_PERMISSION), (_req, res) => {
    res.send('reached')
  })
  const running = await listen(app)
  try {
    const response = await send(running.url, PROTECTED_PATH, [
      ['Authorization', `Bearer ${fixture.tokens.patWithoutPermission}`],
    ])
    assert.equal(response.status, 403)
    assert.deepEqual(recorded, ['ok', 'insufficient_permission'])
  } finally {
    await running.close()
  }
})
