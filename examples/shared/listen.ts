import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'

/** A running example: its base URL and a way to stop it. */
export interface RunningExample {
  readonly url: string
  close(): Promise<void>
}

/** Wraps a listening `node:http` server. */
export function runningServer(server: Server): RunningExample {
  const { address, port } = server.address() as AddressInfo
  return {
    url: `http://${address}:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections()
        server.close((error) => (error ? reject(error) : resolve()))
      }),
  }
}

/** Port from `PORT` (default 3000), on 127.0.0.1. */
export function demoPort(): number {
  return Number(process.env.PORT ?? 3000)
}
