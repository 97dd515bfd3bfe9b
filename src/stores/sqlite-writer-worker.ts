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
 * interleave), the quota lane first. A request may be waiting for a reservation (a key's
 * first block), and a reservation for its key's release in flight (quota-counter.ts);
 * nothing waits for an audit batch or a usage flush, so on a slow disk neither a
 * reservation nor a release queues behind them. The lane keeps its own order: a release is
 * applied before a reservation sent after it. Its writes that arrived while the thread was
 * busy are run in one transaction (one fsync), so N keys needing a block cost one commit,
 * not N. They never depend on the writes they pass.
 */
const writes: WriterRequest[] = []
let quotaLane: WriterRequest[] = []
let running = false
port.on('message', (request: WriterRequest) => {
  if (request.method === 'reserveQuota' || request.method === 'releaseQuota') {
    quotaLane.push(request)
  } else writes.push(request)
  if (!running) {
    running = true
    // After the messages already delivered to this thread: the lane's writes join one batch.
    setImmediate(() => void pump())
  }
})

async function pump(): Promise<void> {
  while (quotaLane.length > 0 || writes.length > 0) {
    if (quotaLane.length > 0) await runQuotaLane()
    else await handle(writes.shift() as WriterRequest)
    // Lets the messages that arrived meanwhile in before the next pick.
    await new Promise((resolve) => setImmediate(resolve))
  }
  running = false
}

async function runQuotaLane(): Promise<void> {
  const batch = quotaLane
  quotaLane = []
  if (batch.length === 1) return handle(batch[0] as WriterRequest)
  try {
    const values = await store.transaction(async (tx) => {
      const counting = tx as unknown as Pick<typeof store, 'reserveQuota' | 'releaseQuota'>
      const answers: unknown[] = []
      for (const { method, args } of batch) {
        const [counter, periodStart, limitOrGeneration, count] = args as [
          string,
          number,
          number,
          number,
        ]
        answers.push(
          method === 'releaseQuota'
            ? await counting.releaseQuota(counter, periodStart, limitOrGeneration, count)
            : await counting.reserveQuota(counter, periodStart, limitOrGeneration, count),
        )
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
