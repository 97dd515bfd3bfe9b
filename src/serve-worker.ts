/** The module every `server.workers` process runs; `serve` forks it (src/server/workers.ts). */
import './stores/sqlite-warning.ts'
import { serveAsProduction } from './lib/serving-process.ts'
import { startTokengate } from './main.ts'
import { runWorker } from './server/workers.ts'

runWorker(async (config, logToStderr, started) => {
  const running = await startTokengate(config, {
    worker: true,
    ...(logToStderr ? { logDestination: process.stderr } : {}),
  })
  // Each worker serves as a one-process `serve` does, through the same function: heap growth
  // bounded (its flag came on the command line from server/workers.ts, which this keeps) and
  // the idle collector.
  const tuned = serveAsProduction({ ...started, workers: 1 })
  return {
    url: running.url,
    adminUrl: running.adminUrl,
    decisionUrl: running.decisionUrl,
    close: async () => {
      tuned.stop()
      await running.close()
    },
  }
})
