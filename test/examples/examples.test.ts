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
const { createBareCoreAuth } = await import('../../examples/shared/bare-core-auth.ts')

const examples = {
  fastify: fastifyExample,
  express: expressExample,
  hono: honoExample,
  'node-http': nodeHttpExample,
}

const wirings: [
  string,
  () => Promise<DemoAuth>,
  [string, (typeof examples)[keyof typeof examples]][],
][] = [
  [
    'createTokengate over the embedded store',
    () => createDemoAuth(undefined),
    Object.entries(examples),
  ],
  // The bare core stays for applications with their own lookups; one example proves it.
  ['the bare core', createBareCoreAuth, [['node-http', nodeHttpExample]]],
]

for (const [wiring, createAuth, apps] of wirings)
  for (const [name, example] of apps) {
    describe(`examples/${name} (${wiring})`, () => {
      let auth: DemoAuth
      let running: RunningExample
      before(async () => {
        auth = await createAuth()
        running = await example.startExample(auth)
      })
      after(async () => {
        await running.close()
        await auth.close()
      })

      test('a PAT with projects:read lists projects', async () => {
        const response = await fetch(`${running.url}/api/v1/projects`, {
          headers: { authorization: `Bearer ${await auth.issuePat(['projects:read'])}` },
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
          headers: { authorization: `Bearer ${await auth.issuePat(['projects:read'])}` },
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

describe('the examples run the whole product (createTokengate over the embedded store)', () => {
  test('a PAT revoked in the store is refused by the running example; a 403 is audited', async () => {
    const auth = await createDemoAuth(undefined)
    const running = await expressExample.startExample(auth)
    try {
      const pat = await auth.issuePat(['projects:read'])
      const call = () =>
        fetch(`${running.url}/api/v1/projects`, { headers: { authorization: `Bearer ${pat}` } })
      assert.equal((await call()).status, 200)
      const forbidden = await fetch(`${running.url}/api/v1/projects`, {
        method: 'POST',
        headers: { authorization: `Bearer ${pat}` },
      })
      assert.equal(forbidden.status, 403)
      const { items } = await auth.gate.store.listPats(DEMO_TENANT, { limit: 10 })
      const id = items.find((record) => record.subject === 'demo-ci')?.id as string
      await auth.gate.store.revokePat(id, Date.now())
      // The change feed reaches the cached lookup within a second; allow a busy machine.
      let status = 200
      for (let i = 0; i < 100 && status === 200; i++) {
        status = (await call()).status
        if (status === 200) await new Promise((resolve) => setTimeout(resolve, 100))
      }
      assert.equal(status, 401)
    } finally {
      await running.close()
      await auth.gate.close()
    }
    const { createTokengate } = await import('tokengate')
    const reopened = await createTokengate({ dataDir: auth.dataDir })
    try {
      const audit = await reopened.store.listAudit(DEMO_TENANT, { limit: 50 })
      assert.ok(
        audit.items.some((event) => event.type === 'auth.forbidden'),
        'no auth.forbidden event',
      )
    } finally {
      await reopened.close()
      await auth.close()
    }
  })
})
