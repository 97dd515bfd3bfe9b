import assert from 'node:assert/strict'
import { registerHooks } from 'node:module'
import { after, before, describe, test } from 'node:test'
import type { DemoAuth } from '../../examples/shared/demo-auth.ts'
import type { RunningExample } from '../../examples/shared/listen.ts'

// The examples import `tokengate/...` as a user does; in the repository that name resolves
// to the sources through the package's `tokengate-source` export condition (the built
// package is proven by test/package/consumer.test.ts).
registerHooks({
  resolve: (specifier, context, next) =>
    next(specifier, { ...context, conditions: [...context.conditions, 'tokengate-source'] }),
})
const expressExample = await import('../../examples/express/server.ts')
const fastifyExample = await import('../../examples/fastify/server.ts')
const honoExample = await import('../../examples/hono/server.ts')
const nodeHttpExample = await import('../../examples/node-http/server.ts')
const { createDemoAuth, DEMO_TENANT } = await import('../../examples/shared/demo-auth.ts')

const examples = {
  fastify: fastifyExample,
  express: expressExample,
  hono: honoExample,
  'node-http': nodeHttpExample,
}

for (const [name, example] of Object.entries(examples)) {
  describe(`examples/${name}`, () => {
    let auth: DemoAuth
    let running: RunningExample
    before(async () => {
      auth = await createDemoAuth()
      running = await example.startExample(auth)
    })
    after(() => running.close())

    test('a PAT with projects:read lists projects', async () => {
      const response = await fetch(`${running.url}/api/v1/projects`, {
        headers: { authorization: `Bearer ${auth.issuePat(['projects:read'])}` },
      })
      assert.equal(response.status, 200)
      const body = (await response.json()) as { tenant: string; subject: string }
      assert.equal(body.tenant, DEMO_TENANT)
      assert.equal(body.subject, 'demo-ci')
    })

    test('a JWT with X-Tenant-Id creates a project', async () => {
      const jwt = await auth.signJwt(['projects:write'])
      const response = await fetch(`${running.url}/api/v1/projects`, {
        method: 'POST',
        headers: { authorization: `Bearer ${jwt}`, 'x-tenant-id': DEMO_TENANT },
      })
      assert.equal(response.status, 201)
    })

    test('a JWT without X-Tenant-Id → 401 tenant_header_required', async () => {
      const jwt = await auth.signJwt(['projects:read'])
      const response = await fetch(`${running.url}/api/v1/projects`, {
        headers: { authorization: `Bearer ${jwt}` },
      })
      assert.equal(response.status, 401)
      assert.equal(((await response.json()) as { code: string }).code, 'tenant_header_required')
    })

    test('no token → 401 with a Bearer challenge; a read-only PAT cannot POST → 403', async () => {
      const anonymous = await fetch(`${running.url}/api/v1/projects`)
      assert.equal(anonymous.status, 401)
      assert.equal(anonymous.headers.get('www-authenticate'), 'Bearer realm="tokengate"')
      const readOnly = await fetch(`${running.url}/api/v1/projects`, {
        method: 'POST',
        headers: { authorization: `Bearer ${auth.issuePat(['projects:read'])}` },
      })
      assert.equal(readOnly.status, 403)
      assert.equal(((await readOnly.json()) as { code: string }).code, 'insufficient_permission')
    })

    test('the health check needs no token', async () => {
      const response = await fetch(`${running.url}/healthz`)
      assert.equal(response.status, 200)
      assert.equal(await response.text(), 'ok')
    })
  })
}
