/**
 * A Hono app (any Fetch handler) served by @hono/node-server on 127.0.0.1 at a free port,
 * over HTTPS when given TLS options, closed as helpers/listen.ts closes.
 *
 * @example
 * const running = await listenHono(app.fetch)
 */
import { once } from 'node:events'
import type { Server } from 'node:http'
import { createServer as createHttpsServer, type ServerOptions } from 'node:https'
import { serve } from '@hono/node-server'
import { type Listening, listenLocal } from './listen.ts'

export async function listenHono(
  fetch: Parameters<typeof serve>[0]['fetch'],
  tls?: ServerOptions,
): Promise<Listening> {
  const https = tls ? { createServer: createHttpsServer, serverOptions: tls } : {}
  const server = serve({ fetch, port: 0, hostname: '127.0.0.1', ...https }) as unknown as Server
  await once(server, 'listening')
  return listenLocal(server)
}
