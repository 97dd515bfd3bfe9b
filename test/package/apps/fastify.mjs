import Fastify from 'fastify'
import { tokengate } from 'tokengate/fastify'
import { announce, openSeededGate, stopOnSignal } from './seed.mjs'

const gate = await openSeededGate()
const app = Fastify()
await app.register(tokengate, gate)
app.get('/api/v1/things', { config: { permissions: ['things:read'] } }, (request) => ({
  tenantId: request.principal.tenantId,
  subject: request.principal.subject,
}))
await app.listen({ host: '127.0.0.1', port: 0 })
announce(app.server.address().port)
stopOnSignal(async () => {
  await app.close()
  await gate.close()
})
