// Type-checked by the consumer test against the installed package: the principal is typed in
// every framework (the test also checks that a misspelt property fails).
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { createTokengate, type Principal } from 'tokengate'
import { requirePermission, tokengate } from 'tokengate/express'
import { tokengate as fastifyTokengate } from 'tokengate/fastify'
import { tokengate as honoTokengate, type TokengateEnv } from 'tokengate/hono'
import { checkRequest } from 'tokengate/node-http'

export async function typedApps(): Promise<string[]> {
  const gate = await createTokengate({ dataDir: '.tokengate' })
  const seen: string[] = []

  const app = express()
  app.use(tokengate(gate))
  app.get('/api/v1/x', requirePermission('x:read'), (req, res) => {
    const fromLocals: Principal | undefined = res.locals.principal
    seen.push(req.principal?.tenantId ?? '', fromLocals?.subject ?? '')
  })

  const fastify = Fastify()
  await fastify.register(fastifyTokengate, gate)
  fastify.get('/api/v1/x', (request) => request.principal?.tenantId)

  const hono = new Hono<TokengateEnv>()
  hono.use('/api/v1/*', honoTokengate(gate))
  hono.get('/api/v1/x', (c) => c.text(c.get('principal').tenantId))

  const request = { rawHeaders: [], method: 'GET', url: '/api/v1/x', socket: {} as never }
  const outcome = await checkRequest(request, gate, { requestId: 'r1' })
  if (outcome.allowed) seen.push(outcome.principal.tenantId)
  return seen
}
