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
