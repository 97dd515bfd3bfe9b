/**
 * Configuration errors a new user meets, worded for them (issue #35) instead of straight
 * from the validator: a missing setting names its flag and variable, a URL pattern is said in
 * words, an unknown key or a misspelt TOKENGATE_* variable gets "did you mean", and a
 * Postgres that cannot be reached is named with DATABASE_URL. The bin as a process.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { runTokengate } from '../helpers/launch.ts'
import { freePort } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'

describe('configuration errors name what to change', () => {
  const dir = tempDir('tg-config-errors-')
  const serve = (args: string[], env: Record<string, string> = {}, config?: object) => {
    const file = join(dir, `config-${Math.random().toString(36).slice(2)}.json`)
    if (config) writeFileSync(file, JSON.stringify(config))
    return runTokengate(['serve', '--dev', '--http', '--listen', '127.0.0.1:0', ...args], {
      cwd: dir,
      env: {
        TOKENGATE_DATA_DIR: join(dir, 'data'),
        ...(config ? { TOKENGATE_CONFIG: file } : {}),
        ...env,
      },
      timeoutMs: 20_000,
    })
  }

  it('a gateway without an upstream: the missing setting, its flag and variable', async () => {
    const run = await serve([], {}, { gateway: { policyStore: true } })
    assert.equal(run.code, 1, run.stderr)
    assert.match(
      run.stderr,
      /\/gateway\/upstream: required \(set it with --upstream URL, TOKENGATE_UPSTREAM/,
    )
    assert.doesNotMatch(run.stderr, /must have required properties/)
  })

  it('an upstream that is not an http(s) URL is said so, not as a regular expression', async () => {
    const run = await serve(['--upstream', 'ftp://files.example'])
    assert.equal(run.code, 2, run.stderr)
    assert.match(run.stderr, /\/gateway\/upstream: must be an http\(s\) URL/)
    assert.doesNotMatch(run.stderr, /must match pattern/)
  })

  it('an unknown key gets "did you mean"', async () => {
    const run = await serve([], {}, { server: { prot: 8443 } })
    assert.equal(run.code, 1, run.stderr)
    assert.match(run.stderr, /\/server\/prot: unknown setting \(did you mean server\.port\?\)/)
  })

  it('a misspelt TOKENGATE_* variable is warned about with the one meant', async () => {
    const run = await runTokengate(['tenant', 'list', '--data-dir', join(dir, 'none')], {
      cwd: dir,
      env: { TOKENGATE_DATADIR: join(dir, 'data') },
    })
    assert.match(
      run.stderr,
      /warning: TOKENGATE_DATADIR is not a tokengate variable and is ignored \(did you mean TOKENGATE_DATA_DIR\?\)/,
    )
  })

  it('a Postgres that cannot be reached is named, with DATABASE_URL', async () => {
    const port = await freePort()
    const url = `postgres://tokengate:hunter2@127.0.0.1:${port}/tokengate`
    for (const run of [
      await serve([], { DATABASE_URL: url }),
      await runTokengate(['tenant', 'list'], { cwd: dir, env: { DATABASE_URL: url } }),
    ]) {
      assert.equal(run.code, 1, run.stderr)
      assert.match(
        run.stderr,
        new RegExp(
          `cannot reach Postgres at tokengate@127\\.0\\.0\\.1:${port}/tokengate \\(databaseUrl: --database-url, DATABASE_URL`,
        ),
      )
      assert.doesNotMatch(run.stderr, /hunter2/)
    }
  })
})
