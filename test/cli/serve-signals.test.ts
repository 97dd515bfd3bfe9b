/**
 * Signals to a real single-process `tokengate serve`: operators and tools (logrotate, systemd
 * `ExecReload`) send SIGHUP to reload, and Node's default for SIGHUP is to exit.
 */
import assert from 'node:assert/strict'
import type { ChildProcess } from 'node:child_process'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { type ServeProcess, serveProcess } from '../helpers/launch.ts'
import { tempDataDir } from './helpers.ts'

describe('tokengate serve (one process) and SIGHUP', () => {
  const data = tempDataDir()
  let served: ServeProcess
  let child: ChildProcess
  let url = ''
  const stderr = () => served.stderr()

  before(async () => {
    served = await serveProcess(['serve', '--dev', '--http', '--listen', '127.0.0.1:0', '--json'], {
      env: { TOKENGATE_DATA_DIR: data.dir, TOKENGATE_WORKERS: '1' },
    })
    child = served.child
    url = served.document.url
  })

  after(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    data.cleanup()
  })

  it('keeps serving after SIGHUP without a policy file, and says there was nothing to reload', async () => {
    child.kill('SIGHUP')
    for (let i = 0; i < 100 && !stderr().includes('SIGHUP'); i++) await sleep(50)
    assert.equal(child.exitCode, null, `serve exited on SIGHUP: ${stderr()}`)
    assert.equal(child.signalCode, null, `serve was killed by SIGHUP: ${stderr()}`)
    assert.match(stderr(), /SIGHUP: no gateway or decision policy file to reload/)
    const response = await fetch(new URL('/healthz', url))
    assert.equal(response.status, 200)
  })

  it('still stops gracefully on SIGTERM afterwards', async () => {
    child.kill('SIGTERM')
    assert.equal(await served.exited, 0)
  })
})
