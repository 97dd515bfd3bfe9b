/**
 * The peers tokengate is compared with, one per process, each answering the same routes:
 * - `GET /api/v1/me`: 200 `{ subject, tenant }` for a valid token;
 * - `GET /api/v1/tokens`: 403 unless the token grants `tokens:read`;
 * - any other path: 200 `{ ok: true }` (the upstream, and the no-auth ceilings).
 * JWT peers also refuse a request whose X-Tenant-Id differs from the `tenant_id` claim (401),
 * the one rule of tokengate's a peer can express in a line.
 *
 * Kinds: fastify-noauth (the ceiling), node-http (no auth), fastify-naive (PATs: SHA-256 and a
 * Map per request), fastify-naive-answer (the same check answering what createTokengate answers
 * an allowed PAT: its request id, RateLimit pair and body; nothing counted), fastify-jwt (@fastify/jwt, its verified-token cache on), express-jwt,
 * hono-jwt, upstream (node:http, for the gateway case).
 *
 * Usage: node bench/servers/peer.ts <kind> <alg> <fixturesDir> <port>
 */
import { createHash } from 'node:crypto'
import http from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { type BenchAlgorithm, loadFixtures, readPatRecords } from '../fixtures.ts'

const [kind, algText, fixturesDir, portText] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
]
const port = Number(portText)
const fixtures = loadFixtures(fixturesDir)
const alg = algText as BenchAlgorithm
const entry = fixtures.algs[alg] ?? fixtures.algs.RS256
/** The verification key as each library takes it: a PEM, or the secret text for HS256. */
const key = alg === 'HS256' ? (entry.secretText as string) : (entry.publicPem as string)
const OK = JSON.stringify({ ok: true })

type Claims = { sub?: string; tenant_id?: string; permissions?: string[] }

/** 401 / 403 / 200 for a verified payload, the same decision in every peer. */
function decide(path: string, claims: Claims, tenantHeader: string | undefined): number {
  if (tenantHeader !== undefined && tenantHeader !== claims.tenant_id) return 401
  if (path.startsWith('/api/v1/tokens') && !claims.permissions?.includes('tokens:read')) return 403
  return 200
}
const body = (claims: Claims) => JSON.stringify({ subject: claims.sub, tenant: claims.tenant_id })
const tenantOf = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value)

type NaivePat = { subject: string; permissions: readonly string[]; tenantId: string }
type NaiveRequest = FastifyRequest & { pat?: NaivePat }

/**
 * fastify-naive-answer's extra: an allowed PAT answered as bench/servers/library.ts
 * --create-tokengate answers it: `x-request-id` (an 11-character prefix and a counter), the
 * RateLimit pair of a per-token policy with the remaining count going down, and (the route)
 * `{ subject, tenant }` from the token's record.
 */
function createTokengateAnswer() {
  let served = 0
  return (request: NaiveRequest, reply: FastifyReply, found: NaivePat): void => {
    served++
    reply.header('x-request-id', `lEBVGZ4oVpA-${served}`)
    reply.header('ratelimit-policy', '"per-token";q=1000000000;w=60')
    reply.header('ratelimit', `"per-token";r=${(1_000_000_000 - served).toFixed(0)};t=60`)
    request.pat = found
  }
}

async function start(): Promise<void> {
  switch (kind) {
    case 'node-http':
    case 'upstream': {
      const server = http.createServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' }).end(OK)
      })
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
      return
    }
    case 'fastify-noauth':
    case 'fastify-naive':
    case 'fastify-naive-answer': {
      const { default: Fastify } = await import('fastify')
      const app = Fastify()
      if (kind !== 'fastify-noauth') {
        // The naive PAT check of the first row: hash every token, look it up.
        const pats = new Map<string, NaivePat>()
        for (const record of readPatRecords(fixtures)) pats.set(record.tokenHash, record)
        const answer = kind === 'fastify-naive-answer' ? createTokengateAnswer() : undefined
        app.addHook('onRequest', async (request: NaiveRequest, reply) => {
          const header = request.headers.authorization ?? ''
          const token = header.startsWith('Bearer ') ? header.slice(7) : ''
          const found = pats.get(createHash('sha256').update(token).digest('hex'))
          if (!found) return reply.code(401).send({ error: 'unauthorized' })
          const status = decide(
            request.url,
            { tenant_id: found.tenantId, permissions: [...found.permissions] },
            undefined,
          )
          if (status !== 200) return reply.code(status).send({ error: 'denied' })
          answer?.(request, reply, found)
        })
        if (answer) {
          app.decorateRequest('pat', undefined)
          app.get('/*', async (request: NaiveRequest) => ({
            subject: request.pat?.subject,
            tenant: request.pat?.tenantId,
          }))
          await app.listen({ port, host: '127.0.0.1' })
          return
        }
      }
      app.get('/*', async () => ({ ok: true }))
      await app.listen({ port, host: '127.0.0.1' })
      return
    }
    case 'fastify-jwt': {
      const { default: Fastify } = await import('fastify')
      const { default: fastifyJwt } = await import('@fastify/jwt')
      const app = Fastify()
      await app.register(fastifyJwt, {
        secret: alg === 'HS256' ? key : { public: key },
        verify: { algorithms: [alg], cache: true },
      } as never)
      app.addHook('onRequest', async (request, reply) => {
        let claims: Claims
        try {
          claims = await request.jwtVerify<Claims>()
        } catch {
          return reply.code(401).send({ error: 'unauthorized' })
        }
        const status = decide(request.url, claims, tenantOf(request.headers['x-tenant-id']))
        if (status !== 200) return reply.code(status).send({ error: 'denied' })
        ;(request as unknown as { claims: Claims }).claims = claims
      })
      app.get('/*', async (request) => body((request as unknown as { claims: Claims }).claims))
      await app.listen({ port, host: '127.0.0.1' })
      return
    }
    case 'express-jwt': {
      const { default: express } = await import('express')
      const { expressjwt } = await import('express-jwt')
      const app = express()
      app.use(expressjwt({ secret: key, algorithms: [alg as never] }))
      app.use((request, response) => {
        const claims = (request as unknown as { auth: Claims }).auth
        const status = decide(request.path, claims, tenantOf(request.headers['x-tenant-id']))
        if (status !== 200) return void response.status(status).json({ error: 'denied' })
        response.type('application/json').send(body(claims))
      })
      app.use(
        (
          _error: unknown,
          _request: unknown,
          response: { status(code: number): { json(body: unknown): void } },
          _next: unknown,
        ) => {
          response.status(401).json({ error: 'unauthorized' })
        },
      )
      await new Promise<void>((resolve) => app.listen(port, '127.0.0.1', () => resolve()))
      return
    }
    case 'hono-jwt': {
      const { Hono } = await import('hono')
      const { jwt } = await import('hono/jwt')
      const { serve } = await import('@hono/node-server')
      const app = new Hono()
      app.use('/*', jwt({ secret: key, alg } as never))
      app.all('/*', (c) => {
        const claims = c.get('jwtPayload' as never) as Claims
        const status = decide(c.req.path, claims, c.req.header('x-tenant-id'))
        if (status !== 200) return c.json({ error: 'denied' }, status as 401)
        return c.body(body(claims), 200, { 'content-type': 'application/json' })
      })
      await new Promise<void>((resolve) => {
        serve({ fetch: app.fetch, port, hostname: '127.0.0.1' }, () => resolve())
      })
      return
    }
    default:
      throw new Error(`unknown peer ${kind}`)
  }
}

await start()

console.log(`READY ${port}`)
// An orderly exit on SIGTERM, so `--cpu-prof` (bench/profile.ts) writes its profile.
process.on('SIGTERM', () => process.exit(0))
