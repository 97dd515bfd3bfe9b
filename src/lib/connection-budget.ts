import type { Socket } from 'node:net'
import { addressKeyOf } from './address-key.ts'

/** Open connections of the whole process, over every listener. */
export interface ConnectionBudget {
  /**
   * Counts `socket` in until it closes, or destroys it (false) when the process or the
   * socket's address (IPv6: its /64) already holds its cap.
   */
  admit(socket: Socket): boolean
}

/**
 * The connection caps as one budget for every listener of a process (API, decision, gRPC):
 * descriptors are the process's, so sockets held on one listener took them from the others'
 * clients (RLIMIT_NOFILE 256: 300 idle sockets on the gRPC port and the API served nobody).
 * `caps` are the ones fitted to the descriptor limit (descriptor-budget.ts); 0: no cap.
 */
export function createConnectionBudget(caps: {
  readonly maxConnections: number
  readonly maxConnectionsPerAddress: number
}): ConnectionBudget {
  let total = 0
  const open = new Map<string, number>()
  return {
    admit(socket) {
      const key = addressKeyOf(socket.remoteAddress ?? '')
      const count = (open.get(key) ?? 0) + 1
      if (
        (caps.maxConnections > 0 && total >= caps.maxConnections) ||
        (caps.maxConnectionsPerAddress > 0 && count > caps.maxConnectionsPerAddress)
      ) {
        socket.destroy()
        return false
      }
      total++
      open.set(key, count)
      socket.once('close', () => {
        total--
        const left = (open.get(key) ?? 1) - 1
        if (left <= 0) open.delete(key)
        else open.set(key, left)
      })
      return true
    },
  }
}
