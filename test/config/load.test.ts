import assert from 'node:assert/strict'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { renderConfigurationDoc } from '../../src/config/docs.ts'
import { ConfigError, loadConfig, SECRET_ENV_VARIABLES } from '../../src/config/load.ts'
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

  describe('<NAME>_FILE for every secret-bearing variable', () => {
    const secrets: Record<
      string,
      { value: string; read: (c: ReturnType<typeof loadConfig>) => unknown }
    > = {
      DATABASE_URL: { value: 'postgres://app:s3cret@127.0.0.1/db', read: (c) => c.databaseUrl },
      DATABASE_LISTEN_URL: {
        value: 'postgres://listen:s3cret@127.0.0.1/db',
        read: (c) => c.databaseListenUrl,
      },
      REDIS_URL: { value: 'redis://:s3cret@127.0.0.1:6379/0', read: (c) => c.redisUrl },
      TOKENGATE_EVENTS_WEBHOOK_URL: {
        value: 'https://hooks.example/T0/s3cret',
        read: (c) => c.events.webhookUrl,
      },
      TOKENGATE_EVENTS_WEBHOOK_SECRET: {
        value: 's3cret-hmac-0123456789',
        read: (c) => c.events.webhookSecret,
      },
    }
    // Both webhook settings go together; each case gives the other one directly.
    const companions: Record<string, Record<string, string>> = {
      TOKENGATE_EVENTS_WEBHOOK_URL: { TOKENGATE_EVENTS_WEBHOOK_SECRET: 'x'.repeat(32) },
      TOKENGATE_EVENTS_WEBHOOK_SECRET: { TOKENGATE_EVENTS_WEBHOOK_URL: 'https://hooks.example/' },
    }

    it('lists exactly these variables as secrets', () => {
      assert.deepEqual([...SECRET_ENV_VARIABLES].sort(), Object.keys(secrets).sort())
    })

    for (const [name, { value, read }] of Object.entries(secrets)) {
      it(`${name}_FILE: the file's content, one trailing newline trimmed`, () => {
        const file = join(tempDir('tg-secret-'), 'secret')
        writeFileSync(file, `${value}\n`, { mode: 0o600 })
        const env = { ...dev.env, ...companions[name], [`${name}_FILE`]: file }
        assert.equal(read(loadConfig({ env })), value)
      })
    }

    it('keeps inner whitespace and trims only one trailing newline (LF or CRLF)', () => {
      const dir = tempDir('tg-secret-')
      const lf = join(dir, 'lf')
      writeFileSync(lf, ' s3cret-0123456789 \n\n')
      const crlf = join(dir, 'crlf')
      writeFileSync(crlf, 's3cret-0123456789\r\n')
      const url = { TOKENGATE_EVENTS_WEBHOOK_URL: 'https://hooks.example/' }
      const secretOf = (file: string) =>
        loadConfig({ env: { ...dev.env, ...url, TOKENGATE_EVENTS_WEBHOOK_SECRET_FILE: file } })
          .events.webhookSecret
      assert.equal(secretOf(lf), ' s3cret-0123456789 \n')
      assert.equal(secretOf(crlf), 's3cret-0123456789')
    })

    it('refuses NAME and NAME_FILE together, naming both and echoing neither value', () => {
      const file = join(tempDir('tg-secret-'), 'url')
      writeFileSync(file, 'redis://:from-file@127.0.0.1:6379\n')
      assert.throws(
        () =>
          loadConfig({
            env: {
              ...dev.env,
              REDIS_URL: 'redis://:from-env@127.0.0.1:6379',
              REDIS_URL_FILE: file,
            },
          }),
        (error: ConfigError) =>
          error instanceof ConfigError &&
          error.problems.some((p) => p.includes('REDIS_URL') && p.includes('REDIS_URL_FILE')) &&
          !error.message.includes('from-file') &&
          !error.message.includes('from-env'),
      )
    })

    it('refuses an unreadable or empty file with the variable and path named', () => {
      const dir = tempDir('tg-secret-')
      const missing = join(dir, 'missing')
      assert.throws(
        () => loadConfig({ env: { ...dev.env, DATABASE_URL_FILE: missing } }),
        (error: ConfigError) =>
          error instanceof ConfigError &&
          error.problems.some((p) => p.startsWith('DATABASE_URL_FILE') && p.includes(missing)),
      )
      assert.throws(
        () => loadConfig({ env: { ...dev.env, DATABASE_URL_FILE: dir } }),
        (error: ConfigError) => error.problems.some((p) => p.startsWith('DATABASE_URL_FILE')),
      )
      const empty = join(dir, 'empty')
      writeFileSync(empty, '\n')
      assert.throws(
        () => loadConfig({ env: { ...dev.env, DATABASE_URL_FILE: empty } }),
        (error: ConfigError) =>
          error.problems.some((p) => p.startsWith('DATABASE_URL_FILE') && /empty/.test(p)),
      )
    })

    it('a bad value from a file is reported against NAME_FILE, without the value', () => {
      const file = join(tempDir('tg-secret-'), 'url')
      writeFileSync(file, 'mysql://root:hunter2@db\n')
      assert.throws(
        () => loadConfig({ env: { ...dev.env, DATABASE_URL_FILE: file } }),
        (error: ConfigError) =>
          error.problems.some(
            (p) => p.startsWith('/databaseUrl') && p.includes('DATABASE_URL_FILE'),
          ) && !error.message.includes('hunter2'),
      )
    })

    it('is not offered for settings that are file paths already or not secret', () => {
      const file = join(tempDir('tg-secret-'), 'port')
      writeFileSync(file, '9999\n')
      // TOKENGATE_PORT_FILE is not a variable tokengate reads: the port stays the default.
      assert.equal(loadConfig({ env: { ...dev.env, TOKENGATE_PORT_FILE: file } }).server.port, 8443)
    })
  })

  it('docs/configuration.md is generated from the current schema (run `npm run docs`)', () => {
    const onDisk = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8')
    assert.equal(onDisk, renderConfigurationDoc())
  })
})
