import assert from 'node:assert/strict'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { renderConfigurationDoc } from '../../src/config/docs.ts'
import { ConfigError, loadConfig } from '../../src/config/load.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const dev = { env: { TOKENGATE_DEV: 'true' } }

describe('loadConfig', () => {
  it('fills every default and freezes the result', () => {
    const config = loadConfig(dev)
    assert.equal(config.dataDir, '.tokengate')
    assert.equal(config.server.port, 8443)
    assert.equal(config.server.host, '127.0.0.1')
    assert.equal(config.auth.clockToleranceSec, 30)
    assert.equal(config.pagination.maxLimit, 200)
    assert.ok(Object.isFrozen(config.server))
    assert.throws(() => {
      ;(config.server as { port: number }).port = 1
    }, TypeError)
  })

  it('merges file < environment < overrides, converting strings from the environment', () => {
    const dir = tempDir('tg-config-')
    const file = join(dir, 'tokengate.yaml')
    writeFileSync(file, 'dev: true\nserver:\n  port: 9000\n  host: 0.0.0.0\nlog:\n  level: warn\n')
    const config = loadConfig({
      file,
      env: { TOKENGATE_PORT: '9100', DATABASE_URL: 'postgres://u@127.0.0.1/db' },
      overrides: { log: { level: 'error' } },
    })
    assert.equal(config.server.port, 9100)
    assert.equal(config.server.host, '0.0.0.0')
    assert.equal(config.log.level, 'error')
    assert.equal(config.databaseUrl, 'postgres://u@127.0.0.1/db')
  })

  it('reads the file named by TOKENGATE_CONFIG, JSON too', () => {
    const dir = tempDir('tg-config-')
    const file = join(dir, 'tokengate.json')
    writeFileSync(file, JSON.stringify({ dev: true, pagination: { defaultLimit: 10 } }))
    assert.equal(loadConfig({ env: { TOKENGATE_CONFIG: file } }).pagination.defaultLimit, 10)
  })

  it('reports every bad path at once, unknown settings included', () => {
    try {
      loadConfig({
        env: { TOKENGATE_DEV: 'true' },
        overrides: { bogus: 1, server: { port: 70000, nope: true } },
      })
      assert.fail('expected a ConfigError')
    } catch (error) {
      assert.ok(error instanceof ConfigError)
      assert.deepEqual([...error.problems].sort(), [
        '/bogus: unknown setting',
        '/server/nope: unknown setting',
        '/server/port: must be <= 65535',
      ])
    }
  })

  it('names the allowed values of an enumeration, alongside other problems', () => {
    assert.throws(
      () =>
        loadConfig({
          env: { TOKENGATE_DEV: 'true', TOKENGATE_PORT: 'x', TOKENGATE_LOG_LEVEL: 'loud' },
        }),
      (error: ConfigError) =>
        error.problems.includes(
          '/server/port: must be integer (from the environment variable TOKENGATE_PORT; fix or unset it)',
        ) &&
        error.problems.some((p) => p.startsWith('/log/level: must be one of "fatal", "error"')) &&
        error.problems.length === 2,
    )
  })

  it('leaves the caller’s overrides object untouched', () => {
    const overrides = { dev: true, server: { host: '0.0.0.0' } }
    loadConfig({ env: {}, overrides })
    assert.deepEqual(overrides, { dev: true, server: { host: '0.0.0.0' } })
    assert.equal(Object.isFrozen(overrides.server), false)
  })

  it('refuses HTTPS without certificate outside dev mode, and half a TLS pair', () => {
    assert.throws(() => loadConfig({ env: {} }), /HTTPS needs tlsCertFile/)
    assert.throws(
      () => loadConfig({ env: { TOKENGATE_TLS_CERT_FILE: 'cert.pem' } }),
      /tlsCertFile and tlsKeyFile must be given together/,
    )
    assert.equal(loadConfig({ env: { TOKENGATE_PLAIN_HTTP: 'true' } }).server.plainHttp, true)
  })

  it('rejects a non-Postgres DATABASE_URL and a malformed config file with the file named', () => {
    assert.throws(
      () => loadConfig({ env: { ...dev.env, DATABASE_URL: 'mysql://x' } }),
      /\/databaseUrl/,
    )
    const dir = tempDir('tg-config-')
    const file = join(dir, 'bad.json')
    writeFileSync(file, '{ not json')
    assert.throws(
      () => loadConfig({ file }),
      (e: Error) => e.message.includes(file),
    )
    assert.throws(() => loadConfig({ file: join(dir, 'missing.json') }), /missing\.json/)
  })

  it('docs/configuration.md is generated from the current schema (run `npm run docs`)', () => {
    const onDisk = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8')
    assert.equal(onDisk, renderConfigurationDoc())
  })
})
