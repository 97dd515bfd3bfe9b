/** The module every `server.workers` process runs; `serve` forks it (src/server/workers.ts). */
import './stores/sqlite-warning.ts'
import { startTokengate } from './main.ts'
import { runWorker } from './server/workers.ts'

runWorker((config, logToStderr) =>
  startTokengate(config, {
    worker: true,
    ...(logToStderr ? { logDestination: process.stderr } : {}),
  }),
)
