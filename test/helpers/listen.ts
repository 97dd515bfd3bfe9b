/**
 * A test's HTTP or HTTPS server on 127.0.0.1 at a free port, and a close that does not wait
 * for the keep-alive connections a client left open.
 *
 * @example
 * const running = await listenLocal(createServer(app))
 * try { await fetch(`${running.url}/api/v1/me`) } finally { await running.close() }
 */
import type { Server } from 'node:http'
import type { Server as HttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { Server as TlsServer } from 'node:tls'

export interface Listening {
  /** `http://127.0.0.1:<port>` (`https:` for an HTTPS server) */
  readonly url: string
  readonly port: number
  close(): Promise<void>
}

/** Listens, or wraps a server already listening on 127.0.0.1 (one that hono's `serve` started). */
export async function listenLocal(server: Server | HttpsServer): Promise<Listening> {
  if (!server.listening)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  const scheme = server instanceof TlsServer ? 'https' : 'http'
  return {
    url: `${scheme}://127.0.0.1:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
