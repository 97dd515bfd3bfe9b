import { createServer } from 'node:http'
import { checkRequest, requestIdOf, sendRefused } from 'tokengate/node-http'
import { announce, openSeededGate, stopOnSignal } from './seed.mjs'

const gate = await openSeededGate()
const server = createServer(async (req, res) => {
  const requestId = requestIdOf(req)
  const outcome = await checkRequest(req, gate, { requestId, permissions: ['things:read'] })
  if (!outcome.allowed) return sendRefused(res, outcome)
  const { tenantId, subject } = outcome.principal
  res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': requestId })
  res.end(JSON.stringify({ tenantId, subject }))
})
server.listen(0, '127.0.0.1', () => announce(server.address().port))
stopOnSignal(async () => {
  server.close()
  await gate.close()
})
