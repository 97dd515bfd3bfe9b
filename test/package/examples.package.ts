/**
 * The examples as they ship (issue 30): `examples/` is in the package, and so is
 * `deploy/kubernetes/`. Node strips TypeScript types only outside node_modules, so a user
 * copies the examples out of `node_modules/tokengate/` (docs/library.md "Examples") and runs
 * them against the installed package: here every framework app, on Node 24 and on Node 22,
 * answers a PAT with `projects:read` 200, a JWT with `X-Tenant-Id` creating a project 201,
 * and no token 401. The forward-auth configs the docs link to are checked by
 * test/deploy/shipped-links.test.ts from the same file list.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { cpSync, existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { before, describe, test } from 'node:test'
import { promisify } from 'node:util'
import { type Consumers, consumers } from './consumers.ts'

const run = promisify(execFile)
const APPS = ['express', 'fastify', 'hono', 'node-http']

// Runs one example in the consumer project and prints the statuses it answered.
const RUNNER = `
const name = process.argv[2]
const { startExample } = await import(\`./tokengate-examples/\${name}/server.ts\`)
const { createDemoAuth, DEMO_TENANT } = await import('./tokengate-examples/shared/demo-auth.ts')
const auth = await createDemoAuth()
const running = await startExample(auth)
const url = \`\${running.url}/api/v1/projects\`
const read = await fetch(url, { headers: { authorization: \`Bearer \${await auth.issuePat(['projects:read'])}\` } })
const jwt = await auth.signJwt(['projects:write'])
const created = await fetch(url, { method: 'POST', headers: { authorization: \`Bearer \${jwt}\`, 'x-tenant-id': DEMO_TENANT } })
const anonymous = await fetch(url)
console.log(JSON.stringify({ read: read.status, tenant: (await read.json()).tenant, created: created.status, anonymous: anonymous.status, expectedTenant: DEMO_TENANT }))
await running.close()
await auth.close()
`

let installed: Consumers
const projects: Record<string, { dir: string; node: string }> = {}

before(
  async () => {
    installed = await consumers()
    projects['24'] = { dir: installed.node24, node: process.execPath }
    projects['22'] = {
      dir: installed.node22,
      node: join(installed.node22, 'node_modules', '.bin', 'node'),
    }
    for (const { dir } of Object.values(projects)) {
      cpSync(join(dir, 'node_modules', 'tokengate', 'examples'), join(dir, 'tokengate-examples'), {
        recursive: true,
      })
      writeFileSync(join(dir, 'run-example.mjs'), RUNNER)
    }
  },
  { timeout: 600_000 },
)

test('the package ships examples/ and deploy/kubernetes/', () => {
  const shipped = new Set(installed.packed.files.map((f) => f.path))
  for (const path of [
    'examples/forward-auth/nginx.conf',
    'examples/forward-auth/ingress-nginx.yaml',
    'examples/forward-auth/Caddyfile',
    'examples/forward-auth/traefik-dynamic.yml',
    'examples/forward-auth/envoy.yaml',
    'examples/express/server.ts',
    'examples/shared/demo-auth.ts',
    'deploy/kubernetes/base/kustomization.yaml',
    'deploy/kubernetes/overlays/sqlite/kustomization.yaml',
  ]) {
    assert.ok(shipped.has(path), path)
    assert.ok(existsSync(join(installed.node24, 'node_modules', 'tokengate', path)), path)
  }
})

for (const version of ['24', '22']) {
  describe(`the examples copied out of node_modules/tokengate, on Node ${version}`, () => {
    for (const app of APPS) {
      test(`examples/${app}: PAT 200, JWT + X-Tenant-Id 201, no token 401`, async () => {
        const { dir, node } = projects[version] as { dir: string; node: string }
        const { stdout } = await run(node, ['run-example.mjs', app], { cwd: dir, timeout: 60_000 })
        const result = JSON.parse(stdout.trim().split('\n').at(-1) as string)
        assert.deepEqual(result, {
          read: 200,
          tenant: result.expectedTenant,
          created: 201,
          anonymous: 401,
          expectedTenant: result.expectedTenant,
        })
      })
    }
  })
}
