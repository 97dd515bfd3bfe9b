import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import { requirePermission, tokengate } from 'tokengate/hono'
import { announce, openSeededGate, stopOnSignal } from './seed.mjs'

const gate = await openSeededGate()
const app = new Hono()
app.use('/api/v1/*', tokengate(gate))
app.get('/api/v1/things', requirePermission('things:read'), (c) =>
  c.json({ tenantId: c.get('principal').tenantId, subject: c.get('principal').subject }),
)
const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) =>
  announce(info.port),
)
stopOnSignal(async () => {
  server.close()
  await gate.close()
})
