/**
 * tokengate in a Hono app on Node: `npm run example -- examples/hono/server.ts` (in a clone).
 * The middleware sets `c.get('principal')`; on `@hono/node-server` it reads Node's raw
 * headers, so duplicated `Authorization` or `X-Tenant-Id` lines are seen and refused.
 */
import type { Server } from 'node:http'
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import { requirePermission, type TokengateEnv, tokengate } from 'tokengate/hono'
import { createDemoAuth, type DemoAuth, printDemoCommands } from '../shared/demo-auth.ts'
import { demoPort, type RunningExample, runningServer } from '../shared/listen.ts'

export function createApp(auth: DemoAuth): Hono<TokengateEnv> {
  const app = new Hono<TokengateEnv>()
  app.use('/api/v1/*', tokengate(auth.gate))

  app.get('/healthz', (c) => c.text('ok'))
  app.get('/api/v1/projects', requirePermission('projects:read'), (c) => {
    const principal = c.get('principal')
    return c.json({
      tenant: principal.tenantId,
      subject: principal.subject,
      projects: [{ id: 'p1', name: 'Apollo' }],
    })
  })
  app.post('/api/v1/projects', requirePermission('projects:write'), (c) =>
    c.json({ id: 'p2' }, 201),
  )
  return app
}

export function startExample(auth: DemoAuth, port = 0): Promise<RunningExample> {
  const app = createApp(auth)
  return new Promise((resolve) => {
    const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port }, () =>
      resolve(runningServer(server as Server)),
    )
  })
}

if (import.meta.main) {
  const auth = await createDemoAuth()
  const running = await startExample(auth, demoPort())
  await printDemoCommands(running.url, auth)
}
