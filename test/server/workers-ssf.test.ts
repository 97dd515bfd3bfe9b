/**
 * CAEP under `server.workers = 2` (issue #34): a SET pushed to one worker's listener makes a
 * rule that every worker follows within a second, cached JWTs included, while a token of the
 * same subject issued after the event still passes on both.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import http from 'node:http'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { DEV_ISSUER } from '../../src/dev/issuer.ts'
import { cli, tempDataDir } from '../cli/helpers.ts'
import { serveProcess } from '../helpers/launch.ts'
import { CAEP, type SsfTestTransmitter, startSsfTransmitter } from '../helpers/ssf-transmitter.ts'

const AUDIENCE = 'https://api.workers.test/ssf'

interface LogLine {
  readonly pid: number
  readonly msg: string
}

/** One request on its own connection, so the primary spreads them over the workers. */
function get(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { headers, agent: false }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    req.on('error', reject)
    req.end()
  })
}

describe('CAEP with server.workers = 2 (real processes)', { timeout: 120_000 }, () => {
  const data = tempDataDir()
  let tx: SsfTestTransmitter
  let served: Awaited<ReturnType<typeof serveProcess>>
  const log: LogLine[] = []

  before(async () => {
    tx = await startSsfTransmitter()
    tx.setAudience(AUDIENCE)
    const bearerTokenFile = join(data.dir, 'tx-token')
    writeFileSync(bearerTokenFile, `${tx.bearerToken}\n`)
    const configFile = join(data.dir, 'config.json')
    writeFileSync(
      configFile,
      JSON.stringify({
        auth: { lookupCacheTtlMs: 600_000 },
        ssf: {
          receivers: [
            {
              name: 'idp',
              transmitter: tx.issuer,
              audience: AUDIENCE,
              jwtIssuer: DEV_ISSUER,
              delivery: 'push',
              pushUrl: 'https://api.workers.test/ssf/events/idp',
              bearerTokenFile,
              algorithms: ['ES256'],
            },
          ],
        },
      }),
    )
    served = await serveProcess(['serve', '--dev', '--http', '--listen', '127.0.0.1:0', '--json'], {
      env: {
        TOKENGATE_CONFIG: configFile,
        TOKENGATE_DATA_DIR: data.dir,
        TOKENGATE_WORKERS: '2',
        TOKENGATE_LOG_LEVEL: 'info',
      },
      logDestination: { write: (line: string) => log.push(JSON.parse(line) as LogLine) },
    })
  })
  after(async () => {
    served?.child.kill('SIGTERM')
    await served?.exited
    await tx?.close()
  })

  async function mint(subject: string): Promise<string> {
    const minted = await cli(['jwt', 'mint', '--dev', '--tenant', 'demo', '--subject', subject], {
      dataDir: data.dir,
    })
    assert.equal(minted.code, 0, minted.stderr)
    return minted.stdout.trim()
  }

  /** `count` requests, each on its own connection; the statuses and the answering pids. */
  async function ask(jwt: string, count: number) {
    const from = log.length
    const statuses: number[] = []
    for (let i = 0; i < count; i++) {
      statuses.push(
        await get(`${served.document.url}/api/v1/me`, {
          authorization: `Bearer ${jwt}`,
          'x-tenant-id': 'demo',
        }),
      )
    }
    for (
      let i = 0;
      i < 100 && log.slice(from).filter((l) => l.msg === 'request').length < count;
      i++
    )
      await sleep(20)
    const pids = new Set(
      log
        .slice(from)
        .filter((l) => l.msg === 'request')
        .map((l) => l.pid),
    )
    return { statuses: new Set(statuses), pids }
  }

  it('a pushed credential-change is followed by every worker within 1 s; a token issued after it passes', async () => {
    const victim = await mint('workers-caep')
    const warm = await ask(victim, 8)
    assert.deepEqual(warm.statuses, new Set([200]))
    assert.equal(warm.pids.size, 2, 'both workers answered (and cached the JWT)')

    const { iat } = JSON.parse(Buffer.from(victim.split('.')[1] as string, 'base64url').toString())
    const eventSec = (iat as number) + 1
    while (Date.now() / 1000 < eventSec) await sleep(50)
    const newer = await mint('workers-caep')

    const { set } = tx.event(
      CAEP.credentialChange,
      { format: 'iss_sub', iss: DEV_ISSUER, sub: 'workers-caep' },
      AUDIENCE,
      { credential_type: 'password', change_type: 'update', event_timestamp: eventSec },
    )
    const pushed = await tx.push(`${served.document.url}/ssf/events/idp`, set)
    assert.equal(pushed.status, 202, JSON.stringify(pushed.json))
    await sleep(1000)

    const refused = await ask(victim, 8)
    assert.deepEqual(refused.statuses, new Set([401]))
    assert.equal(refused.pids.size, 2, 'both workers refused')
    const passing = await ask(newer, 8)
    assert.deepEqual(passing.statuses, new Set([200]))
    assert.equal(passing.pids.size, 2)
  })
})
