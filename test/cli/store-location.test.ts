/**
 * The CLI run from another directory: a command that reads or changes what a store holds
 * never creates a new, empty store in the working directory (it would answer "(none)" or
 * "no key tok_..." about a store that exists elsewhere); it says where it looked and how to
 * point at the right one. The commands that start a store's life create it and say so.
 * Run as a user runs it: the bin as a process, in a temp working directory.
 */
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { runTokengate } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'

describe('CLI store location', () => {
  const root = tempDir('tokengate-where-')
  const home = join(root, 'home')
  const elsewhere = join(root, 'elsewhere')
  mkdirSync(home)
  mkdirSync(elsewhere)
  const inHome = (args: string[]) => runTokengate(args, { cwd: home })
  const inElsewhere = (args: string[], env: Record<string, string> = {}) =>
    runTokengate(args, { cwd: elsewhere, env })

  it('write commands that start a store create it in the data directory and say so', async () => {
    const created = await inHome(['tenant', 'create', 'acme'])
    assert.equal(created.code, 0, created.stderr)
    assert.match(created.stderr, /created a new store in .*home\/\.tokengate/)
    assert.ok(existsSync(join(home, '.tokengate', 'tokengate.db')))
    const again = await inHome(['tenant', 'create', 'beta'])
    assert.equal(again.code, 0, again.stderr)
    assert.doesNotMatch(again.stderr, /created a new store/)
  })

  for (const args of [
    ['tenant', 'list'],
    ['issuer', 'list'],
    ['pat', 'list', '--tenant', 'acme'],
    ['pat', 'show', 'tok_0123456789abcdef'],
    ['pat', 'revoke', 'tok_0123456789abcdef'],
    ['tenant', 'disable', 'acme'],
    ['admin', 'token', 'list'],
    ['policy', 'show'],
    ['export', '--out', 'exported'],
  ]) {
    it(`'${args.join(' ')}' in another directory names where it looked and creates nothing`, async () => {
      const run = await inElsewhere(args)
      assert.equal(run.code, 1, `${run.stdout}${run.stderr}`)
      assert.match(run.stderr, /no store in \S*elsewhere\/\.tokengate/)
      assert.match(run.stderr, /--data-dir/)
      assert.match(run.stderr, /TOKENGATE_DATA_DIR/)
      assert.doesNotMatch(run.stdout, /\(none\)/)
      assert.equal(existsSync(join(elsewhere, '.tokengate')), false, 'a store was created')
    })
  }

  it('apply --dry-run in another directory refuses instead of planning against an empty store', async () => {
    const file = join(elsewhere, 'tokengate.apply.yaml')
    writeFileSync(file, 'tenants:\n  - id: acme\n')
    const run = await inElsewhere(['apply', '-f', file, '--dry-run'])
    assert.equal(run.code, 1, `${run.stdout}${run.stderr}`)
    assert.match(run.stderr, /no store in \S*elsewhere\/\.tokengate/)
    assert.doesNotMatch(run.stdout, /create tenant acme/)
    assert.equal(existsSync(join(elsewhere, '.tokengate')), false)
  })

  it('pointed at the data directory, the same commands read the existing store', async () => {
    const byFlag = await inElsewhere(['tenant', 'list', '--data-dir', join(home, '.tokengate')])
    assert.equal(byFlag.code, 0, byFlag.stderr)
    assert.match(byFlag.stdout, /acme/)
    const byEnv = await inElsewhere(['tenant', 'list'], {
      TOKENGATE_DATA_DIR: join(home, '.tokengate'),
    })
    assert.equal(byEnv.code, 0, byEnv.stderr)
    assert.match(byEnv.stdout, /beta/)
    assert.equal(existsSync(join(elsewhere, '.tokengate')), false)
  })

  it('migrate creates a new store where asked', async () => {
    const run = await inElsewhere(['migrate'])
    assert.equal(run.code, 0, run.stderr)
    assert.match(run.stderr, /created a new store in \S*elsewhere\/\.tokengate/)
    const listed = await inElsewhere(['tenant', 'list'])
    assert.equal(listed.code, 0, listed.stderr)
    assert.match(listed.stdout, /\(none\)/)
  })
})
