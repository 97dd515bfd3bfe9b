/**
 * tokengate in a plain `node:http` server: `npm run example -- examples/node-http/server.ts` (in a clone).
 * `checkRequest` asks the gate with the route's permissions; `sendRefused` answers a refusal.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { checkRequest, type Principal, requestIdOf, sendRefused } from 'tokengate/node-http'
import { createDemoAuth, type DemoAuth, printDemoCommands } from '../shared/demo-auth.ts'
import { demoPort, type RunningExample, runningServer } from '../shared/listen.ts'

type Handler = (principal: Principal, res: ServerResponse) => void

/** Method + path → required permissions and handler. */
const routes: Record<string, { permissions: string[]; handle: Handler }> = {
  'GET /api/v1/projects': {
    permissions: ['projects:read'],
    handle: (principal, res) =>
      json(res, 200, {
        tenant: principal.tenantId,
        subject: principal.subject,
        projects: [{ id: 'p1', name: 'Apollo' }],
      }),
  },
  'POST /api/v1/projects': {
    permissions: ['projects:write'],
    handle: (_principal, res) => json(res, 201, { id: 'p2' }),
  },
}

export function createHandler(auth: DemoAuth) {
  return async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?', 1)[0] ?? '/'
    if (path === '/healthz') return void res.end('ok')
    const requestId = requestIdOf(req)
    res.setHeader('x-request-id', requestId)
    if (!path.startsWith('/api/v1/')) return json(res, 404, { error: 'not found' })

    // Every /api/v1/ request is checked before it is routed, so unknown paths are 401 too.
    const route = routes[`${req.method} ${path}`]
    const permissions = route?.permissions ?? []
    const outcome = await checkRequest(req, auth.gate, { requestId, permissions })
    if (!outcome.allowed) return sendRefused(res, outcome)
    if (!route) return json(res, 404, { error: 'not found' })
    route.handle(outcome.principal, res)
  }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
}

export function startExample(auth: DemoAuth, port = 0): Promise<RunningExample> {
  const handle = createHandler(auth)
  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500)
      res.end()
    })
  })
  return new Promise((resolve) =>
    server.listen(port, '127.0.0.1', () => resolve(runningServer(server))),
  )
}

if (import.meta.main) {
  const auth = await createDemoAuth()
  const running = await startExample(auth, demoPort())
  await printDemoCommands(running.url, auth)
}
