import Fastify from 'fastify'
import { tokengate } from '../../src/adapters/fastify.ts'
import { PROTECTED_PATH, REQUIRED_PERMISSION, runSpecTable } from './spec-table.ts'

runSpecTable('fastify plugin', async (authenticate) => {
  const app = Fastify()
  await app.register(tokengate, { authenticate })
  app.get(PROTECTED_PATH, { config: { permissions: [REQUIRED_PERMISSION] } }, async (request) => ({
    tenantId: request.principal?.tenantId,
    subject: request.principal?.subject,
  }))
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  return { url, close: () => app.close() }
})
