import type { FastifyInstance } from 'fastify'
import { problem } from '../http/problem.ts'
import type { AuthContext } from './auth-context.ts'

/**
 * Liveness and readiness, outside `/api/v1` and without a token: orchestrators call them.
 * They reveal nothing but up/down.
 */
export function registerHealthRoutes(app: FastifyInstance, auth: AuthContext): void {
  app.get('/healthz', async () => ({ status: 'ok' }))
  app.get('/readyz', async (request, reply) => {
    try {
      await auth.store.ping()
      return { status: 'ready', checks: { store: 'ok' } }
    } catch {
      return reply
        .code(503)
        .header('retry-after', '5')
        .type('application/problem+json')
        .send(problem(503, 'unavailable', 'The store is not reachable.', String(request.id)))
    }
  })
}
