/**
 * tokengate in an Express 5 app: `npm run example -- examples/express/server.ts` (in a clone).
 * `tokengate()` authenticates requests under the prefix and sets `req.principal`;
 * `requirePermission()` guards each route.
 */
import express, { type Express } from 'express'
import { requirePermission, tokengate } from 'tokengate/express'
import { createDemoAuth, type DemoAuth, printDemoCommands } from '../shared/demo-auth.ts'
import { demoPort, type RunningExample, runningServer } from '../shared/listen.ts'

export function createApp(auth: DemoAuth): Express {
  const app = express()
  app.use(tokengate({ ...auth.gate, prefix: '/api/v1/' }))

  app.get('/healthz', (_req, res) => {
    res.send('ok')
  })
  app.get('/api/v1/projects', requirePermission('projects:read'), (req, res) => {
    res.json({
      tenant: req.principal?.tenantId,
      subject: req.principal?.subject,
      projects: [{ id: 'p1', name: 'Apollo' }],
    })
  })
  app.post('/api/v1/projects', requirePermission('projects:write'), (_req, res) => {
    res.status(201).json({ id: 'p2' })
  })
  return app
}

export function startExample(auth: DemoAuth, port = 0): Promise<RunningExample> {
  return new Promise((resolve) => {
    const server = createApp(auth).listen(port, '127.0.0.1', () => resolve(runningServer(server)))
  })
}

if (import.meta.main) {
  const auth = await createDemoAuth()
  const running = await startExample(auth, demoPort())
  await printDemoCommands(running.url, auth)
}
