import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { after, before, describe, it } from 'node:test'
import { startTestServer, type TestServer } from '../helpers/server.ts'

/**
 * The TLS listener as a client meets it: `openssl s_client` offers exactly one suite or
 * protocol version and we read whether the handshake completed. The dev certificate is
 * ECDSA P-256, so the TLS 1.2 suites offered are the ECDHE-ECDSA ones.
 */
function handshake(port: number, args: readonly string[]): Promise<{ ok: boolean; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'openssl',
      ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', 'localhost', ...args],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    )
    let out = ''
    child.stdout.on('data', (chunk) => (out += chunk))
    child.stderr.on('data', (chunk) => (out += chunk))
    child.on('error', reject)
    child.on('close', () => {
      const cipher = /Cipher is (\S+)/.exec(out)?.[1]
      resolve({ ok: cipher !== undefined && cipher !== '(NONE)', out })
    })
    child.stdin.end()
  })
}

describe('TLS: AEAD suites only, TLS 1.2 minimum (Mozilla intermediate)', () => {
  let server: TestServer
  before(async () => {
    server = await startTestServer()
  })
  after(() => server.close())

  it('refuses a CBC-SHA suite over TLS 1.2', async () => {
    const result = await handshake(server.port, ['-tls1_2', '-cipher', 'ECDHE-ECDSA-AES128-SHA'])
    assert.equal(result.ok, false, result.out)
  })

  it('refuses a CBC-SHA256 suite over TLS 1.2', async () => {
    const result = await handshake(server.port, ['-tls1_2', '-cipher', 'ECDHE-ECDSA-AES128-SHA256'])
    assert.equal(result.ok, false, result.out)
  })

  it('refuses an ARIA suite over TLS 1.2', async () => {
    const result = await handshake(server.port, [
      '-tls1_2',
      '-cipher',
      'ECDHE-ECDSA-ARIA128-GCM-SHA256',
    ])
    assert.equal(result.ok, false, result.out)
  })

  it('accepts the AEAD suites of the intermediate list over TLS 1.2', async () => {
    for (const suite of [
      'ECDHE-ECDSA-AES128-GCM-SHA256',
      'ECDHE-ECDSA-AES256-GCM-SHA384',
      'ECDHE-ECDSA-CHACHA20-POLY1305',
    ]) {
      const result = await handshake(server.port, ['-tls1_2', '-cipher', suite])
      assert.equal(result.ok, true, `${suite}: ${result.out}`)
      assert.match(result.out, new RegExp(`Cipher is ${suite}`))
    }
  })

  it('accepts TLS 1.3', async () => {
    const result = await handshake(server.port, ['-tls1_3'])
    assert.equal(result.ok, true, result.out)
  })

  it('refuses TLS 1.1 even when the client allows its legacy suites', async () => {
    const result = await handshake(server.port, ['-tls1_1', '-cipher', 'DEFAULT@SECLEVEL=0'])
    assert.equal(result.ok, false, result.out)
  })
})
