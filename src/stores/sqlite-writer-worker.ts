/**
 * The worker thread of sqlite-writer.ts: a connection of its own to the database file, which
 * runs the store's write-behind writes one message at a time, in order.
 */
// First: the writer thread opens node:sqlite, whose Node 22 warning it does not repeat.
import './sqlite-warning.ts'
import { getHeapStatistics } from 'node:v8'
import { parentPort, workerData } from 'node:worker_threads'
import { memoryReducingGc, startIdleCollector } from '../lib/idle-collector.ts'
import { openSqliteStore } from './sqlite.ts'
import type { WriterReply, WriterRequest } from './sqlite-writer.ts'

const { path, busyTimeoutMs } = workerData as { path: string; busyTimeoutMs?: number }
// No change-log polling: this connection only writes what no cache depends on.
const store = openSqliteStore(path, { busyTimeoutMs, externalChangePollMs: 0 })
const port = parentPort
if (!port) throw new Error('sqlite-writer-worker runs as a worker thread')

// The thread gives its isolate's memory back once its writes go quiet, as the main thread
// does (lib/idle-collector.ts): after a burst its old generation kept the batches it had
// written (100,000 last-used ids, usage rows), 14 MB committed in the memory bench, until
// a major GC that an idle isolate never reaches. Its own heap is the measure, not the
// process's RSS; the pause is this thread's, so no request waits for it.
startIdleCollector({
  collect: memoryReducingGc(),
  rss: () => {
    const heap = getHeapStatistics()
    return heap.total_physical_size + heap.external_memory
  },
  minGrowthBytes: 4 * 1024 * 1024,
})

/**
 * One write at a time: the other writes in the order sent (a batch's statements then never
 * interleave), quota reservations first. A request may be waiting for a reservation (a key's
 * first block); nothing waits for an audit batch or a usage flush, so on a slow disk the
 * reservations do not queue behind them. The reservations that arrived while the thread was
 * busy are answered in one transaction (one fsync), so N keys needing a block cost one
 * commit, not N. They never depend on the writes they pass.
 */
const writes: WriterRequest[] = []
let reservations: WriterRequest[] = []
let running = false
port.on('message', (request: WriterRequest) => {
  if (request.method === 'reserveQuota') reservations.push(request)
  else writes.push(request)
  if (!running) {
    running = true
    // After the messages already delivered to this thread: reservations join one batch.
    setImmediate(() => void pump())
  }
})

async function pump(): Promise<void> {
  while (reservations.length > 0 || writes.length > 0) {
    if (reservations.length > 0) await reserveAll()
    else await handle(writes.shift() as WriterRequest)
    // Lets the messages that arrived meanwhile in before the next pick.
    await new Promise((resolve) => setImmediate(resolve))
  }
  running = false
}

async function reserveAll(): Promise<void> {
  const batch = reservations
  reservations = []
  if (batch.length === 1) return handle(batch[0] as WriterRequest)
  try {
    const values = await store.transaction(async (tx) => {
      const reserving = tx as unknown as Pick<typeof store, 'reserveQuota'>
      const answers: unknown[] = []
      for (const request of batch) {
        const [counter, periodStart, limit, want] = request.args as [string, number, number, number]
        answers.push(await reserving.reserveQuota(counter, periodStart, limit, want))
      }
      return answers
    })
    batch.forEach((request, i) => {
      port?.postMessage({ id: request.id, ok: true, value: values[i] } satisfies WriterReply)
    })
  } catch (error) {
    const err = error instanceof Error ? error : new Error(String(error))
    for (const request of batch) {
      const reply: WriterReply = {
        id: request.id,
        ok: false,
        error: { name: err.name, message: err.message },
      }
      port?.postMessage(reply)
    }
  }
}

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
