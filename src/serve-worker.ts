/** The module every `server.workers` process runs; `serve` forks it (src/server/workers.ts). */
import './stores/sqlite-warning.ts'
import { memoryReducingGc, startIdleCollector } from './lib/idle-collector.ts'
import { startTokengate } from './main.ts'
import { runWorker } from './server/workers.ts'

// Each worker gives its memory back when idle (lib/idle-collector.ts); unref'd, it ends with the process.
startIdleCollector({ collect: memoryReducingGc() })

runWorker((config, logToStderr) =>
  startTokengate(config, {
    worker: true,
    ...(logToStderr ? { logDestination: process.stderr } : {}),
  }),
)
