/**
 * The smallest useful proxy: `node:http` + an undici pool dispatching directly, hop-by-hop
 * headers dropped both ways, no authentication. What one extra HTTP hop costs in Node.js at
 * all: the floor the gateway's pipeline is measured against (issue #15).
 *
 * `--fastify`: the same relay behind a bare Fastify catch-all route (no hooks, no
 * authentication), its status and headers through the reply as the gateway sends them:
 * what Fastify's request handling adds to the hop, apart from tokengate's pipeline.
 *
 * Usage: node bench/servers/undici-proxy.ts <upstreamUrl> <port> [--fastify]  (port 0: any)
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Pool } from 'undici'

const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host'])

/** Starts the proxy on 127.0.0.1:`port`; resolves with its URL. */
export async function startUndiciProxy(upstream: string, port: number): Promise<string> {
  const pool = new Pool(upstream, { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 })
  const server = createServer((req, res) =>
    relay(pool, req, res, (status, headers) => res.writeHead(status, headers)),
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

function relay(
  pool: Pool,
  req: IncomingMessage,
  res: ServerResponse,
  writeHead: (status: number, headers: Record<string, string>) => void,
): void {
  const headers: Record<string, string | string[] | undefined> = {}
  for (const [name, value] of Object.entries(req.headers)) if (!HOP.has(name)) headers[name] = value
  pool.dispatch(
    { method: req.method as 'GET', path: req.url ?? '/', headers, body: null },
    {
      // undici recognises the controller-style handler by this method: keep it.
      onRequestStart() {},
      onResponseStart(controller, status, responseHeaders) {
        for (const name of HOP) delete responseHeaders[name]
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
  const [upstream, portText, variant] = process.argv.slice(2)
  const start = variant === '--fastify' ? startFastifyUndiciProxy : startUndiciProxy
  const url = await start(upstream as string, Number(portText))
  console.log(`READY ${new URL(url).port}`)
  // An orderly exit on SIGTERM, so `--cpu-prof` (bench/profile.ts) writes its profile.
  process.on('SIGTERM', () => process.exit(0))
}
