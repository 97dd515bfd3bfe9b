/**
 * tokengate in a Fastify app: `npm run example -- examples/fastify/server.ts` (in a clone).
 * The plugin authenticates every request under `/api/v1/` (an unknown path there is 401
 * without a valid token, 404 with one); each route lists its permissions in `config`.
 */
import Fastify, { type FastifyInstance } from 'fastify'
import { tokengate } from 'tokengate/fastify'
import { createDemoAuth, type DemoAuth, printDemoCommands } from '../shared/demo-auth.ts'
import { demoPort, type RunningExample } from '../shared/listen.ts'

export async function createApp(auth: DemoAuth): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(tokengate, auth.gate)

  app.get('/healthz', async () => 'ok')
  app.get('/api/v1/projects', { config: { permissions: ['projects:read'] } }, async (request) => ({
    tenant: request.principal?.tenantId,
    subject: request.principal?.subject,
    projects: [{ id: 'p1', name: 'Apollo' }],
  }))
  app.post('/api/v1/projects', { config: { permissions: ['projects:write'] } }, async (_, reply) =>
    reply.code(201).send({ id: 'p2' }),
  )
  return app
}

export async function startExample(auth: DemoAuth, port = 0): Promise<RunningExample> {
  const app = await createApp(auth)
  const url = await app.listen({ host: '127.0.0.1', port })
  return { url, close: () => app.close() }
}

if (import.meta.main) {
  const auth = await createDemoAuth()
  const running = await startExample(auth, demoPort())
  await printDemoCommands(running.url, auth)
}
