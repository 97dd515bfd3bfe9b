import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { checkRequest, requestIdOf, sendRefused } from '../../src/adapters/node-http.ts'
import { PROTECTED_PATH, REQUIRED_PERMISSION, runSpecTable } from './spec-table.ts'

runSpecTable('node:http', async (authenticate) => {
  const server = createServer(async (req, res) => {
    const requestId = requestIdOf(req)
    if (req.url?.split('?', 1)[0] !== PROTECTED_PATH) {
      res.writeHead(404).end()
      return
    }
    const outcome = await checkRequest(
      req,
      { authenticate },
      { requestId, permissions: [REQUIRED_PERMISSION] },
    )
    if (!outcome.allowed) return sendRefused(res, outcome)
    res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': requestId })
    res.end(JSON.stringify({ tenantId: outcome.principal.tenantId }))
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
