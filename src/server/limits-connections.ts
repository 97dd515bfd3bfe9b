import type { Server as HttpServer, IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'
import type { ConnectionBudget } from '../lib/connection-budget.ts'

export interface ConnectionLimits {
  /** Time to the first request head (after the TLS handshake, which has its own timeout). */
  readonly firstByteTimeoutMs: number
}

/**
 * Bounds what idle or abusive sockets can hold, on a listener built by `serverFactory`:
 *
 * - a socket that sends no complete request head within `firstByteTimeoutMs` of being
 *   accepted (of its TLS handshake completing, over HTTPS; the handshake itself is bounded
 *   by the TLS server's `handshakeTimeout`, set to the same value) is destroyed;
 * - `maxConnections` total and `maxConnectionsPerAddress`, counted by `connections` (the
 *   process's budget, shared with its other listeners) on the raw TCP socket before any TLS
 *   work, so one client cannot take the whole total and keep others out.
 *
 * The returned function must be called with each request (before handling it): it stops the
 * first-byte timer of the request's socket.
 *
 * HAProxy's `timeout http-request` + `maxconn` and nginx's `client_header_timeout` +
 * `limit_conn` are the models; Node's defaults (120 s handshake, no caps) held zero-byte
 * sockets for two minutes.
 */
export function limitConnections(
  server: HttpServer,
  secure: boolean,
  limits: ConnectionLimits,
  connections: ConnectionBudget,
): (request: IncomingMessage) => void {
  server.on('connection', (socket: Socket) => connections.admit(socket))

  const waiting = new WeakMap<Socket, NodeJS.Timeout>()
  server.on(secure ? 'secureConnection' : 'connection', (socket: Socket) => {
    if (socket.destroyed) return
    const timer = setTimeout(() => socket.destroy(), limits.firstByteTimeoutMs)
    timer.unref()
    waiting.set(socket, timer)
    socket.once('close', () => clearTimeout(timer))
  })
  // Returned, not a 'request' listener: with two listeners Node copies the listener array on
  // every request; the server's handler calls this first instead (server.ts serverFactory).
  return (request: IncomingMessage) => {
    const timer = waiting.get(request.socket)
    if (timer === undefined) return
    clearTimeout(timer)
    waiting.delete(request.socket)
  }
}
