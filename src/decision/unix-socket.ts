/**
 * The decision listener on a Unix socket (`decision.socket`, issue #36): nginx on the same
 * host asks through `server unix:<path>` and both sides skip the loopback TCP stack on every
 * subrequest. Who may ask is decided by the file's mode, not by an address: every peer on
 * the socket is the proxy `decision.proxy` names (config/load.ts checks the path and that
 * `decision.proxy` is set).
 */
import { chmodSync, lstatSync, unlinkSync } from 'node:fs'
import type { Server } from 'node:http'
import { connect } from 'node:net'

export interface DecisionSocket {
  readonly path: string
  readonly mode: string
}

/**
 * Listens on `socket.path` with `socket.mode`; resolves with `unix:<path>`. A socket file
 * left by a process that died is removed first, but only when nothing answers on it: a
 * second instance must fail, not steal the first one's socket. Anything else at the path is
 * left alone. libuv removes the file when the server closes.
 */
export async function listenOnSocket(server: Server, socket: DecisionSocket): Promise<string> {
  const { path } = socket
  const fail = (reason: string, cause?: unknown) =>
    new Error(`cannot listen on unix:${path}: ${reason}`, { cause })
  let isSocket = false
  try {
    isSocket = lstatSync(path).isSocket()
    if (!isSocket) throw fail('the path exists and is not a socket (not removed)')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  if (isSocket) {
    if (await answers(path)) throw fail('another process listens on it')
    unlinkSync(path)
  }
  await new Promise<void>((resolve, reject) => {
    const failed = (error: NodeJS.ErrnoException) =>
      reject(fail(REASONS[error.code ?? ''] ?? error.message, error))
    server.once('error', failed)
    server.listen(path, () => {
      server.off('error', failed)
      resolve()
    })
  })
  try {
    chmodSync(path, Number.parseInt(socket.mode, 8))
  } catch (error) {
    server.close()
    throw fail(`cannot set its mode ${socket.mode}: ${(error as Error).message}`, error)
  }
  return `unix:${path}`
}

const REASONS: Readonly<Record<string, string>> = {
  EADDRINUSE: 'address already in use',
  EACCES: 'permission denied (the directory must be writable by tokengate)',
  ENOENT: 'no such directory',
}

/** Whether a process accepts connections on the socket at `path`. */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = connect(path)
    probe.once('connect', () => {
      probe.destroy()
      resolve(true)
    })
    probe.once('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ECONNREFUSED' || error.code === 'ENOENT') resolve(false)
      else reject(new Error(`cannot listen on unix:${path}: ${error.message}`, { cause: error }))
    })
  })
}
