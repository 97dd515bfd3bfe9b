/**
 * A test's HTTP server on 127.0.0.1 at a free port, and a close that does not wait for the
 * keep-alive connections a client left open.
 *
 * @example
 * const running = await listenLocal(createServer(app))
 * try { await fetch(`${running.url}/api/v1/me`) } finally { await running.close() }
 */
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Listening {
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  readonly port: number
  close(): Promise<void>
}

export async function listenLocal(server: Server): Promise<Listening> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
