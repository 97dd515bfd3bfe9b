import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Hono } from 'hono'
import { requirePermission, type TokengateEnv, tokengate } from '../../src/adapters/hono.ts'
import type { AuthenticateMaybeSync } from '../../src/core/authenticate.ts'
import { listenHono } from '../helpers/listen-hono.ts'
import { recordingGate } from '../helpers/recording-gate.ts'
import {
  createSpecFixture,
  PROTECTED_PATH,
  REQUIRED_PERMISSION,
  runSpecTable,
} from './spec-table.ts'

function buildApp(authenticate: AuthenticateMaybeSync) {
  const app = new Hono<TokengateEnv>()
  app.use('/api/v1/*', tokengate({ authenticate }))
  app.get(PROTECTED_PATH, requirePermission(REQUIRED_PERMISSION), (c) =>
    c.json({ tenantId: c.get('principal').tenantId, subject: c.get('principal').subject }),
  )
  return app
}

runSpecTable('hono (node-server)', async (authenticate) => {
  const app = buildApp(authenticate)
  return listenHono(app.fetch)
})

test('hono without node-server (Fetch headers only) still refuses two Authorization headers', async () => {
  const fixture = await createSpecFixture()
  const app = buildApp(fixture.authenticate)
  const headers = new Headers()
  headers.append('authorization', `Bearer ${fixture.tokens.pat}`)
  headers.append('authorization', `Bearer ${fixture.tokens.pat}`)
  const duplicate = await app.request(PROTECTED_PATH, { headers })
  assert.equal(duplicate.status, 401)
  assert.equal(((await duplicate.json()) as { code: string }).code, 'malformed_authorization')
  const ok = await app.request(PROTECTED_PATH, {
    headers: { authorization: `Bearer ${fixture.tokens.pat}` },
  })
  assert.equal(ok.status, 200)
})

test("hono: a 403 from requirePermission reaches the gate's recorder (audited like every refusal)", async () => {
  const fixture = await createSpecFixture()
  const { gate, recorded } = recordingGate(fixture.authenticate)
  const app = new Hono<TokengateEnv>()
  app.use('/api/v1/*', tokengate(gate))
  app.get(PROTECTED_PATH, requirePermission(REQUIRED_PERMISSION), (c) => c.text('reached'))
  const response = await app.request(PROTECTED_PATH, {
    headers: { authorization: `Bearer ${fixture.tokens.patWithoutPermission}` },
  })
  assert.equal(response.status, 403)
  assert.deepEqual(recorded, ['ok', 'insufficient_permission'])
})
