/**
 * tokengate as the benchmark runs it: production defaults (rate limiting, audit, last-used
 * tracking on; embedded SQLite store) in a process tuned as `tokengate serve` tunes it (glibc
 * malloc, V8 heap growth, idle collector: src/lib/serving-process.ts), except per-request logging at `warn` (the peers log
 * nothing), plain HTTP (the peers speak plain HTTP too) and rate-limit quotas raised so the
 * load generator's few tokens and one address are never throttled (the limiter still runs
 * on every request; only its thresholds change).
 *
 * Usage: node bench/servers/tokengate.ts <fixturesDir> <port> [upstreamUrl] [--workers=N]
 *   [--decision | --decision-socket=<path>]
 * (`--workers=N`: `server.workers`, N node:cluster workers behind one listener, as `serve`;
 * `--decision`: the forward-auth decision listener too, on a free port printed as
 * `DECISION <port>` before READY; `--decision-socket=<path>`: that listener on a Unix socket,
 * decision.socket, printed as `DECISION unix:<path>`.)
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../../src/config/load.ts'
import { restartWithServedMalloc, serveAsProduction } from '../../src/lib/serving-process.ts'
import { prepareTokengate, startTokengate } from '../../src/main.ts'
import { configForWorkers, startWorkerPool } from '../../src/server/workers.ts'
import {
  loadFixtures,
  seedBenchStore,
  UNLIMITED_IN_FLIGHT,
  UNLIMITED_RATE_LIMITS,
} from '../fixtures.ts'

// The process as `tokengate serve` runs it: glibc malloc as bin/tokengate.js sets it (same pid).
restartWithServedMalloc(process.env)

const workersFlag = process.argv.find((a) => a.startsWith('--workers='))
const workers = workersFlag ? Number(workersFlag.slice('--workers='.length)) : 1
const socketFlag = process.argv.find((a) => a.startsWith('--decision-socket='))
const socket = socketFlag?.slice('--decision-socket='.length)
const decision = process.argv.includes('--decision') || socket !== undefined
const [fixturesDir, portText, upstream] = process.argv
  .slice(2)
  .filter((a) => a !== workersFlag && a !== '--decision' && a !== socketFlag)
const fixtures = loadFixtures(fixturesDir)
const dataDir = mkdtempSync(join(tmpdir(), 'tg-bench-'))

await seedBenchStore(fixtures, dataDir)

const config = loadConfig({
  env: {},
  overrides: {
    dataDir,
    server: { host: '127.0.0.1', port: Number(portText), plainHttp: true, workers },
    log: { level: 'warn' },
    rateLimit: UNLIMITED_RATE_LIMITS,
    ...(upstream ? { gateway: { upstream, ...UNLIMITED_IN_FLIGHT } } : {}),
    ...(decision
      ? {
          decision: {
            host: '127.0.0.1',
            port: 0,
            proxy: 'nginx',
            ...(socket ? { socket: { path: socket } } : {}),
          },
        }
      : {}),
  },
})
const running =
  workers > 1
    ? await prepareTokengate(config).then(() =>
        startWorkerPool({
          config: configForWorkers(config, workers),
          count: workers,
          note: (line) => console.error(line),
          nodeOptions: process.env.NODE_OPTIONS,
        }),
      )
    : await startTokengate(config)
// V8's heap bound and the idle collector, as `serve` sets them once listening.
const tuned = serveAsProduction({
  execArgv: process.execArgv,
  nodeOptions: process.env.NODE_OPTIONS,
  workers,
})
if ('decisionUrl' in running && running.decisionUrl) {
  const { decisionUrl } = running
  console.log(`DECISION ${socket ? decisionUrl : new URL(decisionUrl).port}`)
}
console.log(`READY ${new URL(running.url).port}`)

const stop = async () => {
  tuned.stop()
  await running.close()
  rmSync(dataDir, { recursive: true, force: true })
  process.exit(0)
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
