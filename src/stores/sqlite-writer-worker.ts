/**
 * The worker thread of sqlite-writer.ts: a connection of its own to the database file, which
 * runs the store's write-behind writes one message at a time, in order.
 */
// First: the writer thread opens node:sqlite, whose Node 22 warning it does not repeat.
import './sqlite-warning.ts'
import { parentPort, workerData } from 'node:worker_threads'
import { openSqliteStore } from './sqlite.ts'
import type { WriterReply, WriterRequest } from './sqlite-writer.ts'

const { path, busyTimeoutMs } = workerData as { path: string; busyTimeoutMs?: number }
// No change-log polling: this connection only writes what no cache depends on.
const store = openSqliteStore(path, { busyTimeoutMs, externalChangePollMs: 0 })
const port = parentPort
if (!port) throw new Error('sqlite-writer-worker runs as a worker thread')

// One write at a time, in the order sent (a batch's statements then never interleave).
let queue: Promise<void> = Promise.resolve()
port.on('message', (request: WriterRequest) => {
  queue = queue.then(() => handle(request))
})

async function handle(request: WriterRequest): Promise<void> {
  let reply: WriterReply
  try {
    const value =
      request.method === 'settled'
        ? undefined
        : await (store[request.method] as (...args: readonly unknown[]) => Promise<unknown>)(
            ...request.args,
          )
    reply = { id: request.id, ok: true, value }
  } catch (error) {
    const err = error instanceof Error ? error : new Error(String(error))
    reply = { id: request.id, ok: false, error: { name: err.name, message: err.message } }
  }
  port?.postMessage(reply)
}
