/**
 * The smallest useful proxy: `node:http` + an undici pool dispatching directly, hop-by-hop
 * headers dropped both ways, no authentication. What one extra HTTP hop costs in Node.js at
 * all: the floor the gateway's pipeline is measured against (issue #15).
 *
 * `--fastify`: the same relay behind a bare Fastify catch-all route (no hooks, no
 * authentication), its status and headers through the reply as the gateway sends them:
 * what Fastify's request handling adds to the hop, apart from tokengate's pipeline.
 *
 * `--identity`: the bare relay sending the headers the gateway promises (docs/gateway.md:
 * `X-Auth-*` for the bench PAT, `X-Request-Id`, `X-Forwarded-For`/`-Proto`; no
 * `Authorization`) and answering with `X-Request-Id` and the RateLimit pair, all fixed: no
 * gate. What the gateway's headers cost the hop and its upstream, apart from deciding them.
 *
 * Usage: node bench/servers/undici-proxy.ts <upstreamUrl> <port> [--fastify | --identity]
 * (port 0: any)
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Pool } from 'undici'

const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host'])

/** Starts the proxy on 127.0.0.1:`port`; resolves with its URL. */
export async function startUndiciProxy(
  upstream: string,
  port: number,
  identity = false,
): Promise<string> {
  const pool = new Pool(upstream, { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 })
  const server = createServer(
    identity
      ? (req, res) =>
          relay(pool, req, res, (status, headers) => res.writeHead(status, headers), true)
      : (req, res) => relay(pool, req, res, (status, headers) => res.writeHead(status, headers)),
  )
  server.keepAliveTimeout = 65_000
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** The same relay as a bare Fastify route; resolves with its URL. */
export async function startFastifyUndiciProxy(upstream: string, port: number): Promise<string> {
  const { default: Fastify } = await import('fastify')
  const pool = new Pool(upstream, { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 })
  const app = Fastify()
  app.all('/*', (request, reply) => {
    relay(pool, request.raw, reply.raw, (status, headers) => {
      reply.code(status).headers(headers)
      reply.raw.writeHead(status, reply.getHeaders() as Record<string, string>)
    })
  })
  return await app.listen({ host: '127.0.0.1', port })
}

// The gateway's fields for the bench PAT (docs/gateway.md), fixed: no gate decides them.
export const IDENTITY = {
  'x-auth-tenant': 'bench-tenant',
  'x-auth-subject': 'bench-bot',
  'x-auth-token-type': 'pat',
  'x-auth-token-id': 'tok_JnC7Sm6MukmmbwYtoM5X',
  'x-auth-permissions': 'tokens:read',
}
export const RATE_LIMIT = {
  'ratelimit-policy': '"per-token";q=1000000000;w=60',
  ratelimit: '"per-token";r=999999999;t=60',
}
let relayed = 0

function relay(
  pool: Pool,
  req: IncomingMessage,
  res: ServerResponse,
  writeHead: (status: number, headers: Record<string, string>) => void,
  identity = false,
): void {
  const headers: Record<string, string | string[] | undefined> = {}
  for (const [name, value] of Object.entries(req.headers)) if (!HOP.has(name)) headers[name] = value
  const requestId = identity ? `LDPuyQmJJWE-${++relayed}` : ''
  if (identity) {
    delete headers.authorization
    Object.assign(headers, IDENTITY)
    headers['x-request-id'] = requestId
    headers['x-forwarded-for'] = req.socket.remoteAddress
    headers['x-forwarded-proto'] = 'http'
  }
  pool.dispatch(
    { method: req.method as 'GET', path: req.url ?? '/', headers, body: null },
    {
      // undici recognises the controller-style handler by this method: keep it.
      onRequestStart() {},
      onResponseStart(controller, status, responseHeaders) {
        for (const name of HOP) delete responseHeaders[name]
        if (identity) {
          Object.assign(responseHeaders, RATE_LIMIT)
          responseHeaders['x-request-id'] = requestId
        }
        writeHead(status, responseHeaders as Record<string, string>)
        res.on('drain', () => controller.resume())
      },
      onResponseData: (controller, chunk) => void (res.write(chunk) || controller.pause()),
      onResponseEnd: () => void res.end(),
      onResponseError: () => void res.writeHead(502).end(),
    },
  )
}

if (import.meta.main) {
  const args = process.argv.slice(2)
  const [upstream, portText] = args.filter((arg) => !arg.startsWith('--'))
  const url = args.includes('--fastify')
    ? await startFastifyUndiciProxy(upstream as string, Number(portText))
    : await startUndiciProxy(upstream as string, Number(portText), args.includes('--identity'))
  console.log(`READY ${new URL(url).port}`)
  // An orderly exit on SIGTERM, so `--cpu-prof` (bench/profile.ts) writes its profile.
  process.on('SIGTERM', () => process.exit(0))
}
