import express from 'express'
import { requirePermission, tokengate } from 'tokengate/express'
import { announce, openSeededGate, stopOnSignal } from './seed.mjs'

const gate = await openSeededGate()
const app = express()
app.use('/api/v1', tokengate(gate))
app.get('/api/v1/things', requirePermission('things:read'), (req, res) => {
  res.json({ tenantId: req.principal.tenantId, subject: req.principal.subject })
})
const server = app.listen(0, '127.0.0.1', () => announce(server.address().port))
stopOnSignal(async () => {
  server.close()
  await gate.close()
})
