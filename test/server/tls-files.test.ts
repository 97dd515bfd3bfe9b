/**
 * The operator's TLS files are checked at start: an empty or unparsable certificate or key,
 * or a key that is not the certificate's, stops `serve` with one line naming the setting and
 * the file. Before, empty files were accepted: the server said "listening on https://..."
 * and every handshake failed. Run as a user runs it: the bin as a process.
 */
import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { runTokengate } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'

describe('TLS files that cannot serve HTTPS are refused at start', () => {
  const dir = tempDir('tg-tls-files-')
  const empty = join(dir, 'empty.pem')
  writeFileSync(empty, '')
  const garbage = join(dir, 'garbage.pem')
  writeFileSync(
    garbage,
    '-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n',
  )
  const otherKey = join(dir, 'other-key.pem')
  writeFileSync(
    otherKey,
    generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({
      type: 'pkcs8',
      format: 'pem',
    }),
  )

  const serve = async (cert: string, key: string) => {
    // A dev start first, for a real certificate and key to pair with the broken one.
    const run = await runTokengate(['serve', '--listen', '127.0.0.1:0', '--json'], {
      cwd: dir,
      env: {
        TOKENGATE_DATA_DIR: join(dir, 'data'),
        TOKENGATE_TLS_CERT_FILE: cert,
        TOKENGATE_TLS_KEY_FILE: key,
      },
      timeoutMs: 20_000,
    })
    assert.doesNotMatch(run.stdout + run.stderr, /listening on https/)
    assert.notEqual(run.code, 0)
    return run.stderr
  }

  it('empty certificate and key files: exits naming server.tlsCertFile and the file', async () => {
    const stderr = await serve(empty, empty)
    assert.match(stderr, /server\.tlsCertFile/)
    assert.match(stderr, new RegExp(`${empty.replace(/[.]/g, '\\.')} is empty`))
  })

  it('an unparsable certificate: exits naming the file', async () => {
    const stderr = await serve(garbage, otherKey)
    assert.match(stderr, /garbage\.pem holds no PEM certificate/)
  })

  it('a key that is not the certificate’s: exits naming both files', async () => {
    const { cert } = await import('../../src/server/tls.ts').then(async (tls) =>
      tls.ensureDevCertificate(join(dir, 'dev')),
    )
    const certFile = join(dir, 'cert.pem')
    writeFileSync(certFile, cert)
    const stderr = await serve(certFile, otherKey)
    assert.match(stderr, /other-key\.pem does not belong to the certificate in \S*cert\.pem/)
  })

  it('an empty key with a good certificate: exits naming server.tlsKeyFile', async () => {
    const certFile = join(dir, 'cert.pem')
    const stderr = await serve(certFile, empty)
    assert.match(stderr, new RegExp(`${empty.replace(/[.]/g, '\\.')} is empty`))
    assert.match(stderr, /server\.tlsKeyFile/)
  })
})
