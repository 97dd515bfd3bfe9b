/**
 * `server.clientCertificates` (mutual TLS for certificate-bound tokens): read from the file,
 * the environment (`TOKENGATE_CLIENT_CA_FILE`, `TOKENGATE_CLIENT_CERTIFICATES`) or overrides;
 * refused with plain HTTP or an unknown mode; a CA file that holds no certificate stops the
 * start naming the setting.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { ConfigError, loadConfig } from '../../src/config/load.ts'
import { launchTokengate, needsSources } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { createTestCa } from '../helpers/test-ca.ts'

describe('server.clientCertificates', () => {
  it('from the environment; mode defaults to optional', () => {
    const config = loadConfig({
      env: { TOKENGATE_DEV: 'true', TOKENGATE_CLIENT_CA_FILE: '/etc/ca.pem' },
    })
    assert.deepEqual(config.server.clientCertificates, { caFile: '/etc/ca.pem', mode: 'optional' })
    const required = loadConfig({
      env: {
        TOKENGATE_DEV: 'true',
        TOKENGATE_CLIENT_CA_FILE: '/etc/ca.pem',
        TOKENGATE_CLIENT_CERTIFICATES: 'required',
      },
    })
    assert.equal(required.server.clientCertificates?.mode, 'required')
    assert.equal(
      loadConfig({ env: { TOKENGATE_DEV: 'true' } }).server.clientCertificates,
      undefined,
    )
  })

  it('refused with plain HTTP, without caFile, or with an unknown mode', () => {
    const refused = (overrides: Record<string, unknown>, pattern: RegExp) =>
      assert.throws(
        () => loadConfig({ env: {}, overrides: { dev: true, ...overrides } }),
        (error: unknown) => error instanceof ConfigError && pattern.test(String(error.message)),
      )
    refused(
      { server: { plainHttp: true, clientCertificates: { caFile: '/etc/ca.pem' } } },
      /clientCertificates: needs HTTPS/,
    )
    refused({ server: { clientCertificates: { mode: 'required' } } }, /caFile/)
    refused({ server: { clientCertificates: { caFile: '/x', mode: 'sometimes' } } }, /mode/)
  })

  it('a CA file that holds no certificate stops the start, naming the setting', {
    skip: needsSources('the start error is read in-process'),
  }, async () => {
    const dataDir = tempDir('tg-client-ca-')
    const caFile = join(dataDir, 'not-a-ca.pem')
    writeFileSync(caFile, 'hello\n')
    await assert.rejects(
      launchTokengate({
        dev: true,
        dataDir,
        server: { port: 0, clientCertificates: { caFile } },
        log: { level: 'silent' },
      }),
      /server\.clientCertificates\.caFile .*holds no PEM certificate/,
    )
    // A real CA starts.
    const ca = createTestCa(dataDir)
    const running = await launchTokengate({
      dev: true,
      dataDir,
      server: { port: 0, clientCertificates: { caFile: ca.certFile, mode: 'required' } },
      log: { level: 'silent' },
    })
    await running.close()
  })
})
