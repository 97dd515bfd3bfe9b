import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { after, describe, it } from 'node:test'
import { promisify } from 'node:util'
import { cli, tempDataDir } from './helpers.ts'

const VERSION = (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version

describe('tokengate CLI: help, version and usage errors', () => {
  const data = tempDataDir()
  after(() => data.cleanup())

  it('--version prints the package version', async () => {
    const result = await cli(['--version'])
    assert.equal(result.code, 0)
    assert.equal(result.stdout, `${VERSION}\n`)
  })

  it('--help lists every command and the exit codes', async () => {
    const result = await cli(['--help'])
    assert.equal(result.code, 0)
    for (const command of [
      'serve',
      'migrate',
      'tenant create',
      'pat issue',
      'pat rotate',
      'issuer add',
      'jwt mint',
      'openapi',
    ]) {
      assert.match(result.stdout, new RegExp(`\\n  ${command} `))
    }
    assert.match(result.stdout, /Exit codes: 0 ok, 1 operation failed, 2 usage error/)
  })

  it('help COMMAND and COMMAND --help print the same command help', async () => {
    const viaHelp = await cli(['help', 'pat', 'issue'])
    const viaFlag = await cli(['pat', 'issue', '--help'])
    assert.equal(viaHelp.code, 0)
    assert.equal(viaHelp.stdout, viaFlag.stdout)
    assert.match(viaFlag.stdout, /Usage: tokengate pat issue --tenant ID --subject SUB/)
    assert.match(viaFlag.stdout, /--expires-in DURATION/)
  })

  it('a group with --help lists its subcommands', async () => {
    const result = await cli(['issuer', '--help'])
    assert.equal(result.code, 0)
    assert.match(result.stdout, /issuer add/)
    assert.match(result.stdout, /issuer remove/)
  })

  it('no arguments prints the help to stderr and exits 2', async () => {
    const result = await cli([])
    assert.equal(result.code, 2)
    assert.equal(result.stdout, '')
    assert.match(result.stderr, /Usage: tokengate <command>/)
  })

  it('an unknown command exits 2 and points to --help', async () => {
    const result = await cli(['frobnicate'])
    assert.equal(result.code, 2)
    assert.match(result.stderr, /unknown command 'frobnicate'/)
    assert.match(result.stderr, /tokengate --help/)
  })

  it('an unknown subcommand names the valid ones', async () => {
    const result = await cli(['pat', 'delete', 'tok_1'], { dataDir: data.dir })
    assert.equal(result.code, 2)
    assert.match(
      result.stderr,
      /unknown pat command 'delete' \(expected one of: issue, list, show, edit, disable, enable, usage, revoke, rotate, revoke-leaked\)/,
    )
  })

  it('a group without a subcommand exits 2', async () => {
    const result = await cli(['tenant'], { dataDir: data.dir })
    assert.equal(result.code, 2)
    assert.match(result.stderr, /missing tenant command/)
  })

  it('an unknown flag exits 2 naming the flag and the command help', async () => {
    const result = await cli(['tenant', 'list', '--verbose'], { dataDir: data.dir })
    assert.equal(result.code, 2)
    assert.match(result.stderr, /unknown option '--verbose'/)
    assert.match(result.stderr, /Run 'tokengate tenant list --help' for usage/)
  })

  it('a flag missing its value exits 2 and says what it expects', async () => {
    const result = await cli(['pat', 'list', '--tenant'], { dataDir: data.dir })
    assert.equal(result.code, 2)
    assert.match(result.stderr, /--tenant expects a value \(ID\)/)
  })

  it('a surplus positional argument exits 2', async () => {
    const result = await cli(['tenant', 'list', 'extra'], { dataDir: data.dir })
    assert.equal(result.code, 2)
    assert.match(result.stderr, /unexpected argument 'extra'/)
  })

  it('global options are accepted before the command', async () => {
    assert.equal((await cli(['--data-dir', data.dir, 'migrate'])).code, 0)
    const result = await cli(['--data-dir', data.dir, '--json', 'tenant', 'list'])
    assert.equal(result.code, 0, result.stderr)
    assert.deepEqual(JSON.parse(result.stdout), { tenants: [] })
  })

  it('an invalid configuration exits 1 and prints its problems without a stack trace', async () => {
    const result = await cli(['tenant', 'list'], {
      dataDir: data.dir,
      env: { TOKENGATE_PORT: 'not-a-port' },
    })
    assert.equal(result.code, 1)
    assert.match(result.stderr, /invalid configuration:\n {2}- \/server\/port: must be integer/)
    assert.doesNotMatch(result.stderr, /\n\s+at /)
  })

  it('an unknown option before any command exits 2 naming it', async () => {
    const result = await cli(['--bogus'])
    assert.equal(result.code, 2)
    assert.match(result.stderr, /unknown option '--bogus'/)
  })

  it('an unreachable store exits 1 with one line and no stack trace', async () => {
    const result = await cli([
      'tenant',
      'list',
      '--database-url',
      'postgres://u:secret@127.0.0.1:1/x',
    ])
    assert.equal(result.code, 1)
    assert.match(result.stderr, /^tokengate: tenant list failed: .*ECONNREFUSED/)
    assert.doesNotMatch(result.stderr, /\n\s+at /)
    assert.doesNotMatch(result.stderr, /secret/)
  })

  it('a missing config file exits 1 with the file named', async () => {
    const result = await cli(['tenant', 'list', '--config', '/nonexistent/tokengate.yaml'])
    assert.equal(result.code, 1)
    assert.match(result.stderr, /\/nonexistent\/tokengate.yaml/)
  })

  it('TOKENGATE_DATA_DIR selects the data directory', async () => {
    const other = tempDataDir()
    try {
      const created = await cli(['tenant', 'create', 'env-tenant'], {
        env: { TOKENGATE_DATA_DIR: other.dir },
      })
      assert.equal(created.code, 0, created.stderr)
      const listed = await cli(['tenant', 'list', '--json', '--data-dir', other.dir])
      assert.deepEqual(
        (JSON.parse(listed.stdout) as { tenants: { id: string }[] }).tenants.map((t) => t.id),
        ['env-tenant'],
      )
    } finally {
      other.cleanup()
    }
  })

  it('the real bin prints help when run by Node 24', async () => {
    const { stdout } = await promisify(execFile)('./node_modules/.bin/node', [
      'bin/tokengate.js',
      '--help',
    ])
    assert.match(stdout, /Usage: tokengate <command> \[options\]/)
    assert.match(stdout, /pat issue/)
  })
})
