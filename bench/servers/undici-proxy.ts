/**
 * The smallest useful proxy: `node:http` + an undici pool dispatching directly, hop-by-hop
 * headers dropped both ways, no authentication. What one extra HTTP hop costs in Node.js at
 * all: the floor the gateway's pipeline is measured against (issue #15).
 *
 * Usage: node bench/servers/undici-proxy.ts <upstreamUrl> <port>  (port 0: any free port)
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Pool } from 'undici'

/** Starts the proxy on 127.0.0.1:`port`; resolves with its URL. */
export async function startUndiciProxy(upstream: string, port: number): Promise<string> {
  const pool = new Pool(upstream, { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 })
  const hop = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host'])
  const server = createServer((req, res) => {
    const headers: Record<string, string | string[] | undefined> = {}
    for (const [name, value] of Object.entries(req.headers))
      if (!hop.has(name)) headers[name] = value
    pool.dispatch(
      { method: req.method as 'GET', path: req.url ?? '/', headers, body: null },
      {
        // undici recognises the controller-style handler by this method: keep it.
        onRequestStart() {},
        onResponseStart(controller, status, responseHeaders) {
          for (const name of hop) delete responseHeaders[name]
          res.writeHead(status, responseHeaders as Record<string, string>)
          res.on('drain', () => controller.resume())
        },
        onResponseData: (controller, chunk) => void (res.write(chunk) || controller.pause()),
        onResponseEnd: () => void res.end(),
        onResponseError: () => void res.writeHead(502).end(),
      },
    )
  })
  server.keepAliveTimeout = 65_000
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

if (import.meta.main) {
  const [upstream, portText] = process.argv.slice(2)
  const url = await startUndiciProxy(upstream as string, Number(portText))
  console.log(`READY ${new URL(url).port}`)
  // An orderly exit on SIGTERM, so `--cpu-prof` (bench/profile.ts) writes its profile.
  process.on('SIGTERM', () => process.exit(0))
}
