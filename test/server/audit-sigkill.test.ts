/**
 * Issue #25: with every worker SIGKILLed right after a burst of 401s, their `auth.failed`
 * events (written behind every 200 ms) were lost and nothing recorded it. Each event is now
 * spooled to a file before the 401 is answered, and the replacement workers store what the
 * killed ones left. Real `serve` with 2 workers, real SIGKILLs.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { AS_PID_1, namespacePids, pidNamespaceSkip } from '../helpers/pid-namespace.ts'
import { childrenOf, statusOnFreshConnection as get, spawnServe } from '../helpers/serve-process.ts'
import { tempDir } from '../helpers/temp-dir.ts'

describe('audit events of SIGKILLed workers', {
  skip: process.platform !== 'linux' && 'needs /proc',
}, () => {
  it('every auth.failed of a burst survives killing every worker right after it', async (t) => {
    const dataDir = tempDir('tg-audit-kill-')
    const configFile = join(dataDir, 'config.json')
    writeFileSync(configFile, JSON.stringify({ rateLimit: { enabled: false } }))
    const served = await spawnServe({
      env: {
        TOKENGATE_CONFIG: configFile,
        TOKENGATE_DATA_DIR: dataDir,
        TOKENGATE_WORKERS: '2',
        TOKENGATE_LOG_LEVEL: 'warn',
      },
    })
    t.after(() => served.stop())
    const url = `${served.url}/api/v1/me`
    const stderr = served.stderr
    const workers = childrenOf(served.child.pid as number)
    assert.equal(workers.length, 2)

    const burst = 400
    const statuses = await Promise.all(
      Array.from({ length: burst }, (_, i) => get(url, `not-a-token-${i}`)),
    )
    assert.ok(statuses.every((s) => s === 401))
    for (const pid of workers) process.kill(pid, 'SIGKILL')

    // The primary replaces them; the replacements store what the killed ones spooled.
    const db = new DatabaseSync(join(dataDir, 'tokengate.db'), { readOnly: true })
    t.after(() => db.close())
    const count = () =>
      Number(
        db.prepare("SELECT count(*) AS n FROM audit_events WHERE type = 'auth.failed'").get()?.n,
      )
    const deadline = Date.now() + 15_000
    while (count() < burst && Date.now() < deadline) await sleep(100)
    t.diagnostic(`${count()} of ${burst} auth.failed events stored after killing both workers`)
    assert.equal(count(), burst, stderr())
    assert.equal(
      Number(
        db.prepare("SELECT count(*) AS n FROM audit_events WHERE type = 'audit.dropped'").get()?.n,
      ),
      0,
    )
  })
})

/**
 * Issue #30: in a container the server is PID 1 at every start. Spool segments were named by
 * PID and replayed only when that PID was dead, so the successor (PID 1 again) took the dead
 * process's segment for its own, and on a host PID 1 is always alive: 0 of 25 stored.
 */
describe('audit events of a SIGKILLed PID 1', { skip: pidNamespaceSkip() }, () => {
  const refusals = 25

  /** Serves as PID 1 of a new PID namespace; returns it and its host PID. */
  async function serveAsPid1(env: Record<string, string>) {
    const served = await spawnServe({ env, wrap: AS_PID_1 })
    const [pid] = childrenOf(served.child.pid as number)
    assert.ok(pid, 'unshare has its child')
    assert.equal(namespacePids(pid).at(-1), 1, 'the server is PID 1 of its namespace')
    // unshare ignores SIGTERM while it waits: the server itself is told to stop.
    const stop = async () => {
      if (served.child.exitCode !== null || served.child.signalCode !== null) return
      const exited = new Promise((resolve) => served.child.once('exit', resolve))
      process.kill(pid, 'SIGTERM')
      await exited
    }
    return { served, pid, stop }
  }

  function setUp() {
    const dataDir = tempDir('tg-audit-pid1-')
    const configFile = join(dataDir, 'config.json')
    writeFileSync(configFile, JSON.stringify({ rateLimit: { enabled: false } }))
    const env = {
      TOKENGATE_CONFIG: configFile,
      TOKENGATE_DATA_DIR: dataDir,
      TOKENGATE_WORKERS: '1',
      TOKENGATE_LOG_LEVEL: 'warn',
    }
    const failed = () => {
      const db = new DatabaseSync(join(dataDir, 'tokengate.db'), { readOnly: true })
      try {
        return Number(
          db.prepare("SELECT count(*) AS n FROM audit_events WHERE type = 'auth.failed'").get()?.n,
        )
      } finally {
        db.close()
      }
    }
    return { dataDir, env, failed }
  }

  async function refuseThenKill(env: Record<string, string>) {
    const { served, pid } = await serveAsPid1(env)
    const statuses = await Promise.all(
      Array.from({ length: refusals }, (_, i) => get(`${served.url}/api/v1/me`, `nope-${i}`)),
    )
    assert.ok(statuses.every((s) => s === 401))
    process.kill(pid, 'SIGKILL')
    await new Promise((resolve) => served.child.once('exit', resolve))
  }

  async function waitFor(count: () => number) {
    for (let i = 0; i < 150 && count() < refusals; i++) await sleep(100)
    return count()
  }

  it('a successor that is PID 1 again stores every event the killed PID 1 spooled', async (t) => {
    const { env, failed } = setUp()
    await refuseThenKill(env)
    const next = await serveAsPid1(env)
    t.after(() => next.stop())
    const stored = await waitFor(failed)
    t.diagnostic(`${stored} of ${refusals} auth.failed stored after restarting as PID 1`)
    assert.equal(stored, refusals, next.served.stderr())
  })

  it('a process on the host (where PID 1 is alive) stores what a killed PID 1 spooled', async (t) => {
    const { env, failed } = setUp()
    await refuseThenKill(env)
    const next = await spawnServe({ env })
    t.after(() => next.stop())
    const stored = await waitFor(failed)
    t.diagnostic(`${stored} of ${refusals} auth.failed stored after restarting on the host`)
    assert.equal(stored, refusals, next.stderr())
  })
})
