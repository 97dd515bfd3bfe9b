import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import {
  authenticateRequest,
  authorize,
  requestIdOf,
  sendFailure,
} from '../../src/adapters/node-http.ts'
import { PROTECTED_PATH, REQUIRED_PERMISSION, runSpecTable } from './spec-table.ts'

runSpecTable('node:http', async (authenticate) => {
  const server = createServer(async (req, res) => {
    const requestId = requestIdOf(req)
    if (req.url?.split('?', 1)[0] !== PROTECTED_PATH) {
      res.writeHead(404).end()
      return
    }
    const result = await authenticateRequest(req, authenticate)
    if (!result.ok) return sendFailure(res, result.failure, requestId)
    const denied = authorize(result.principal, [REQUIRED_PERMISSION])
    if (denied) return sendFailure(res, denied, requestId)
    res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': requestId })
    res.end(JSON.stringify({ tenantId: result.principal.tenantId }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
})
