import http from 'node:http'
import type { Socket } from 'node:net'
import { pathOf } from '../http/api-path.ts'

/** Where the Prometheus text comes from: one process's registry, or the cluster's sum. */
export interface MetricsText {
  readonly contentType: string
  collect(): Promise<string>
}

/**
 * Serves `GET /metrics` (Prometheus text format) on its own plain-HTTP server; every other
 * path is 404. Resolves once listening.
 */
export async function listenForMetrics(
  source: MetricsText,
  host: string,
  port: number,
  onConnection?: (socket: Socket) => void,
): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const path = pathOf(req.url ?? '')
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n')
      return
    }
    source.collect().then(
      (text) => {
        res.writeHead(200, { 'content-type': source.contentType }).end(text)
      },
      () => {
        // A failing source (the store behind the outbox gauge) must not hide the rest.
        res.writeHead(500, { 'content-type': 'text/plain' }).end('collecting metrics failed\n')
      },
    )
  })
  server.keepAliveTimeout = 5000
  if (onConnection) server.on('connection', onConnection)
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  return server
}
