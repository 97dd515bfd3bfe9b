import { createServer } from 'node:http'
import { checkRequest, requestIdOf, sendRefused } from '../../src/adapters/node-http.ts'
import { listenLocal } from '../helpers/listen.ts'
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
  return listenLocal(server)
})
