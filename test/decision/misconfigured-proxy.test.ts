/**
 * A decision listener set up for the wrong proxy (`proxy: nginx`, Caddy calling) answers 400
 * to every request: one warn line per episode says which header family arrived, which one
 * was expected and the setting to change. The gRPC port is in the start-up lines and in the
 * banner. A real `serve` process, raw HTTP requests.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import http from 'node:http'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnTokengate } from '../helpers/launch.ts'
import { type ServeProcess, spawnServe } from '../helpers/serve-process.ts'
import { freePort } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'

/** One GET to the decision listener as Caddy's forward_auth sends it. */
function askAsCaddy(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      {
        host: '127.0.0.1',
        port,
        path: '/',
        headers: {
          'x-forwarded-method': 'GET',
          'x-forwarded-uri': '/api/v1/me',
          'x-forwarded-host': 'example.test',
          'x-forwarded-proto': 'https',
        },
      },
      (res) => {
        res.resume()
        resolve(res.statusCode ?? 0)
      },
    )
    req.on('error', reject)
  })
}

describe('a decision listener configured for another proxy', () => {
  const dir = tempDir('tg-wrong-proxy-')
  let served: ServeProcess
  let decisionPort = 0
  let grpcPort = 0
  let config = ''
  before(async () => {
    decisionPort = await freePort()
    grpcPort = await freePort()
    config = join(dir, 'tokengate.json')
    writeFileSync(
      config,
      JSON.stringify({ decision: { port: decisionPort, grpcPort, proxy: 'nginx' } }),
    )
    served = await spawnServe({
      env: { TOKENGATE_DATA_DIR: join(dir, 'data'), TOKENGATE_CONFIG: config },
    })
  })
  after(() => served?.stop())

  it('Caddy calling a listener set to nginx: 400s, and one warn line naming decision.proxy: caddy', async () => {
    for (let i = 0; i < 5; i++) assert.equal(await askAsCaddy(decisionPort), 400)
    await sleep(200)
    const warnings = served
      .stderr()
      .split('\n')
      .filter((line) => line.includes('"diagnostic":"proxy_kind:nginx:caddy"'))
    assert.equal(warnings.length, 1, served.stderr().slice(-3000))
    const line = JSON.parse(warnings[0] as string) as { level: number; msg: string }
    assert.equal(line.level, 40)
    assert.match(line.msg, /sent X-Forwarded-Method\/-Uri/)
    assert.match(line.msg, /X-Original-Method\/-URI/)
    assert.match(line.msg, /set decision\.proxy: caddy/)
  })

  it('the gRPC port has its start-up line', () => {
    assert.match(
      served.stderr(),
      new RegExp(`listening on http://127\\.0\\.0\\.1:${grpcPort}: decision gRPC`),
    )
  })

  it('the banner names the gRPC port', async () => {
    writeFileSync(
      join(dir, 'banner.json'),
      JSON.stringify({ decision: { port: 0, grpcPort: 0, proxy: 'envoy' } }),
    )
    const child = spawnTokengate(['serve', '--dev', '--http', '--listen', '127.0.0.1:0'], {
      env: {
        TOKENGATE_DATA_DIR: join(dir, 'data-banner'),
        TOKENGATE_CONFIG: join(dir, 'banner.json'),
      },
    })
    let text = ''
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      text += chunk
    })
    try {
      for (let i = 0; i < 400 && !text.includes('Press Ctrl+C'); i++) await sleep(25)
      assert.match(text, /decision gRPC: http:\/\/127\.0\.0\.1:\d+/, text)
    } finally {
      child.kill('SIGTERM')
    }
  })
})
