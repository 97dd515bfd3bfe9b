import { createServer } from 'node:http'
import { authenticateRequest, authorize, requestIdOf, sendFailure } from 'tokengate/node-http'
import { announce, openSeededGate, stopOnSignal } from './seed.mjs'

const gate = await openSeededGate()
const server = createServer(async (req, res) => {
  const requestId = requestIdOf(req)
  const result = await authenticateRequest(req, gate.authenticate)
  if (!result.ok) return sendFailure(res, result.failure, requestId)
  const denied = authorize(result.principal, ['things:read'])
  if (denied) return sendFailure(res, denied, requestId)
  const { tenantId, subject } = result.principal
  res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': requestId })
  res.end(JSON.stringify({ tenantId, subject }))
})
server.listen(0, '127.0.0.1', () => announce(server.address().port))
stopOnSignal(async () => {
  server.close()
  await gate.close()
})
