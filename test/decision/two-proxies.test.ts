/**
 * Two proxies on one host (nginx and Caddy, both calling from 127.0.0.1): an address is one
 * proxy, so one decision listener cannot believe both families. `decision.listeners` gives
 * the second proxy kind its own port: each listener believes exactly its own family, from
 * the trusted addresses only. A real `serve` process, raw requests as each proxy sends them.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import http from 'node:http'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { runTokengate } from '../helpers/launch.ts'
import { type ServeProcess, spawnServe } from '../helpers/serve-process.ts'
import { freePort } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'

function ask(port: number, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/', headers }, (res) => {
      res.resume()
      resolve(res.statusCode ?? 0)
    })
    req.on('error', reject)
  })
}

describe('two proxies on one host, one tokengate', () => {
  const dir = tempDir('tg-two-proxies-')
  const dataDir = join(dir, 'data')
  let served: ServeProcess
  let nginxPort = 0
  let caddyPort = 0
  let token = ''
  before(async () => {
    nginxPort = await freePort()
    caddyPort = await freePort()
    const config = join(dir, 'tokengate.json')
    writeFileSync(
      config,
      JSON.stringify({
        decision: {
          port: nginxPort,
          proxy: 'nginx',
          listeners: [{ port: caddyPort, proxy: 'caddy' }],
        },
      }),
    )
    served = await spawnServe({ env: { TOKENGATE_DATA_DIR: dataDir, TOKENGATE_CONFIG: config } })
    const issued = await runTokengate(
      ['pat', 'issue', '--tenant', 'demo', '--subject', 'two', '--json', '--data-dir', dataDir],
      { cwd: dir },
    )
    assert.equal(issued.code, 0, issued.stderr)
    token = (JSON.parse(issued.stdout) as { token: string }).token
  })
  after(() => served?.stop())

  const asNginx = () => ({
    authorization: `Bearer ${token}`,
    'x-original-method': 'GET',
    'x-original-uri': '/api/v1/me',
  })
  const asCaddy = () => ({
    authorization: `Bearer ${token}`,
    'x-forwarded-method': 'GET',
    'x-forwarded-uri': '/api/v1/me',
  })

  it('each listener decides its own proxy’s requests', async () => {
    assert.equal(await ask(nginxPort, asNginx()), 200)
    assert.equal(await ask(caddyPort, asCaddy()), 200)
  })

  it('each believes exactly one family: the other proxy’s headers are not read', async () => {
    assert.equal(await ask(nginxPort, asCaddy()), 400)
    assert.equal(await ask(caddyPort, asNginx()), 400)
  })

  it('the second listener has its start-up line', () => {
    assert.match(
      served.stderr(),
      new RegExp(`listening on http://127\\.0\\.0\\.1:${caddyPort}: decision for caddy`),
    )
  })
})
