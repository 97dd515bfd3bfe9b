/**
 * Operator errors name the variable, flag or file and the fix (issue #13), through the CLI
 * as an operator runs it. Seen before the fix: `/server/port: must be integer` alone,
 * `--upstream ftp://x` exiting 1, a bare OpenSSL code for a bad PEM, `missing.yaml:0:0`,
 * and nothing on stdout for a `--json` failure.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { loadConfig } from '../../src/config/load.ts'
import { cli, tempDataDir } from '../cli/helpers.ts'

describe('operator errors', () => {
  const data = tempDataDir()
  after(() => data.cleanup())

  test('TOKENGATE_PORT=abc names the variable and the fix, never echoing a value', async () => {
    const result = await cli(['serve', '--dev'], {
      dataDir: data.dir,
      env: { TOKENGATE_PORT: 'abc' },
    })
    assert.equal(result.code, 1)
    assert.match(
      result.stderr,
      /\/server\/port: must be integer \(from the environment variable TOKENGATE_PORT; fix or unset it\)/,
    )
    assert.doesNotMatch(result.stderr, /abc/)
  })

  test('a bad value in the config file names the file', () => {
    const file = join(data.dir, 'bad.json')
    writeFileSync(file, JSON.stringify({ server: { port: 'x' } }))
    assert.throws(
      () => loadConfig({ file, env: {} }),
      /must be integer \(in the config file .*bad\.json\)/,
    )
  })

  test('--upstream ftp://x names the flag and exits 2 like other bad values', async () => {
    const result = await cli(['serve', '--dev', '--upstream', 'ftp://x'], { dataDir: data.dir })
    assert.equal(result.code, 2)
    assert.match(result.stderr, /\/gateway\/upstream: .*\(the flag --upstream; fix its value\)/)
  })

  test('a missing policy file names the setting and the fix, not file:0:0', async () => {
    const result = await cli(
      ['serve', '--dev', '--upstream', 'http://127.0.0.1:9', '--policy', 'missing.yaml'],
      { dataDir: data.dir },
    )
    assert.equal(result.code, 1)
    assert.match(
      result.stderr,
      /\/gateway\/policyFile: the policy file missing\.yaml does not exist .*fix the path/,
    )
    assert.doesNotMatch(result.stderr, /:0:0/)
  })

  test('a bad PEM names both settings and files', async () => {
    const pem = join(data.dir, 'bad.pem')
    writeFileSync(pem, 'not a certificate\n')
    const result = await cli(['serve', '--listen', '127.0.0.1:0'], {
      dataDir: data.dir,
      env: { TOKENGATE_TLS_CERT_FILE: pem, TOKENGATE_TLS_KEY_FILE: pem },
    })
    assert.equal(result.code, 1)
    assert.match(
      result.stderr,
      /server\.tlsCertFile .*bad\.pem \/ server\.tlsKeyFile .*bad\.pem \(TOKENGATE_TLS_CERT_FILE \/ TOKENGATE_TLS_KEY_FILE\): not a readable PEM/,
    )
  })

  test('with --json a failure is one JSON document on stdout', async () => {
    const usage = await cli(['tenant', 'get', '--json'], { dataDir: data.dir })
    assert.equal(usage.code, 2)
    assert.deepEqual(JSON.parse(usage.stdout).error.kind, 'usage')
    const config = await cli(['serve', '--dev', '--upstream', 'ftp://x', '--json'], {
      dataDir: data.dir,
    })
    const parsed = JSON.parse(config.stdout) as { error: { problems: string[]; exitCode: number } }
    assert.equal(parsed.error.exitCode, 2)
    assert.match(String(parsed.error.problems[0]), /--upstream/)
    const failed = await cli(['pat', 'revoke', 'tok_nope', '--json'], { dataDir: data.dir })
    assert.equal(failed.code, 1)
    assert.equal(JSON.parse(failed.stdout).error.kind, 'failed')
  })
})
