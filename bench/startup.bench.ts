/**
 * Start-up to first served request, embedded store, three ways:
 * - spawn the `tokengate` bin (`bin/tokengate.js serve --http`, what operators run) on a
 *   prepared (migrated, seeded) data directory, timed from spawn until the first 200 from
 *   /healthz (process start, module loading, store open, listen); the bin enables Node's
 *   compile cache, primed by one unmeasured start (as any start after the first);
 * - spawn `node src/entry.ts serve --http` (no compile cache), for comparison;
 * - in-process: `startTokengate(config)` until the first 200 (modules already loaded).
 * Plain HTTP, so no certificate is generated or read. Target: under 500 ms.
 *
 * Run: `node bench/startup.bench.ts [--repeats 5]`
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../src/config/load.ts'
import { startTokengate } from '../src/main.ts'
import { openStore } from '../src/stores/open-store.ts'
import { readCli } from './cli.ts'
import { median } from './latency-stats.ts'

const REPEATS = readCli({
  script: 'bench/startup.bench.ts',
  options: { repeats: { type: 'number', integer: true, default: 5 } },
}).values.repeats

async function waitForHealth(url: string, deadline: number): Promise<void> {
  for (;;) {
    try {
      const response = await fetch(`${url}/healthz`)
      await response.arrayBuffer()
      if (response.status === 200) return
    } catch {}
    if (performance.now() > deadline) throw new Error('no 200 from /healthz')
    await new Promise((resolve) => setTimeout(resolve, 2))
  }
}

const dataDir = mkdtempSync(join(tmpdir(), 'tg-start-'))
const store = await openStore({ dataDir })
await store.migrate()
await store.createTenant({ id: 'start', name: 'Start' }, Date.now())
await store.close()

const spawned: number[] = []
const spawnedBare: number[] = []
const inProcess: number[] = []
const compileCache = join(dataDir, 'compile-cache')

async function spawnUntilHealthy(entry: string, port: number): Promise<number> {
  const started = performance.now()
  const child = spawn(
    process.execPath,
    [entry, 'serve', '--http', '--listen', `127.0.0.1:${port}`, '--data-dir', dataDir],
    {
      stdio: 'ignore',
      // The bin's cache in a directory of this run; the bare entry runs without one.
      env: entry.startsWith('bin/')
        ? { ...process.env, NODE_COMPILE_CACHE: compileCache }
        : { ...process.env, NODE_COMPILE_CACHE: '' },
    },
  )
  await waitForHealth(`http://127.0.0.1:${port}`, started + 10_000)
  const elapsed = performance.now() - started
  child.kill('SIGTERM')
  await new Promise((resolve) => child.once('exit', resolve))
  return elapsed
}

try {
  await spawnUntilHealthy('bin/tokengate.js', 19_799) // primes the compile cache
  for (let i = 0; i < REPEATS; i++) {
    spawned.push(await spawnUntilHealthy('bin/tokengate.js', 19_800 + 2 * i))
    spawnedBare.push(await spawnUntilHealthy('src/entry.ts', 19_801 + 2 * i))
  }
  for (let i = 0; i < REPEATS; i++) {
    const config = loadConfig({
      env: {},
      overrides: {
        dataDir,
        server: { host: '127.0.0.1', port: 0, plainHttp: true },
        log: { level: 'warn' },
      },
    })
    const started = performance.now()
    const running = await startTokengate(config)
    await waitForHealth(running.url, started + 10_000)
    inProcess.push(performance.now() - started)
    await running.close()
  }
} finally {
  rmSync(dataDir, { recursive: true, force: true })
}
const show = (values: number[]) => values.map((v) => Math.round(v)).join(', ')
console.log(
  `spawn bin/tokengate.js (compile cache) → first 200: median ${Math.round(median(spawned))} ms (${show(spawned)})`,
)
console.log(
  `spawn node src/entry.ts (no compile cache) → first 200: median ${Math.round(median(spawnedBare))} ms (${show(spawnedBare)})`,
)
console.log(
  `in-process startTokengate → first 200: median ${Math.round(median(inProcess))} ms (${show(inProcess)}; the first includes module loading)`,
)
