/**
 * The package installed with `npm install --omit=optional`, as the README tells a
 * library-only user to: the library works, and the CLI either works or says in one line
 * which packages its command needs (never a stack trace). Seen before the fix: `--version`,
 * `--help` and `apply` crashed with `ERR_MODULE_NOT_FOUND: Cannot find package 'yaml'` and
 * a stack.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { before, describe, test } from 'node:test'
import { promisify } from 'node:util'
import { consumers, npmEnv, REPO_VERSION } from './consumers.ts'

const run = promisify(execFile)
let project = ''

interface Ran {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

function tokengate(...args: string[]): Promise<Ran> {
  return run(join(project, 'node_modules', '.bin', 'tokengate'), args, {
    cwd: project,
    env: npmEnv,
  }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number; stdout: string; stderr: string }) => error,
  )
}

/** One `tokengate:` line on stderr, exit 1, no stack trace. */
function assertOneLine(result: Ran, pattern: RegExp): void {
  assert.equal(result.code, 1, result.stderr)
  assert.equal(result.stderr.trimEnd().split('\n').length, 1, result.stderr)
  assert.match(result.stderr, pattern)
  assert.doesNotMatch(result.stderr, /\n\s+at |ERR_MODULE_NOT_FOUND/)
}

describe('installed with --omit=optional', () => {
  before(async () => {
    project = (await consumers()).lean
  })

  test('the optional dependencies are really absent', () => {
    for (const name of ['fastify', 'pino', 'yaml', 'jose']) {
      assert.equal(existsSync(join(project, 'node_modules', name)), false, name)
    }
  })

  test('tokengate --version and --help work', async () => {
    const version = await tokengate('--version')
    assert.deepEqual([version.code, version.stdout.trim()], [0, REPO_VERSION])
    const help = await tokengate('--help')
    assert.equal(help.code, 0, help.stderr)
    assert.match(help.stdout, /^Usage: tokengate <command>/m)
    for (const word of ['serve', 'tenant create', 'pat issue', 'apply', 'admin token issue']) {
      assert.match(help.stdout, new RegExp(`^ {2}${word} `, 'm'), word)
    }
  })

  test('store commands work: tenant create and list', async () => {
    const dataDir = join(project, 'data')
    assert.equal((await tokengate('--data-dir', dataDir, 'tenant', 'create', 'acme')).code, 0)
    const listed = await tokengate('--data-dir', dataDir, 'tenant', 'list', '--json')
    assert.equal(listed.code, 0, listed.stderr)
    assert.equal(JSON.parse(listed.stdout).tenants[0].id, 'acme')
  })

  test('apply and serve say in one line what to install', async () => {
    const file = join(project, 'tokengate.yaml')
    writeFileSync(file, 'tenants:\n  - id: acme\n')
    const NEEDS =
      /^tokengate: (apply|serve) failed: this feature needs tokengate's optional dependencies, which are not installed \('[a-z]+' is missing; npm install --omit=optional leaves them out\): install tokengate without --omit=optional, or npm install (\S+@[\d.]+ )+\S+@[\d.]+\n$/
    assertOneLine(await tokengate('apply', '-f', file), NEEDS)
    assertOneLine(await tokengate('serve', '--dev', '--data-dir', join(project, 'serve')), NEEDS)
  })

  test('the library works: createTokengate and every adapter load', async () => {
    writeFileSync(
      join(project, 'library.mjs'),
      `import { createTokengate, readAuthHeaders } from 'tokengate'
import 'tokengate/express'
import 'tokengate/hono'
import 'tokengate/node-http'
import 'tokengate/fastify'
const gate = await createTokengate({ dataDir: 'library-data' })
const result = await gate.authenticate(readAuthHeaders(['Authorization', 'Bearer pat_x']))
console.log(JSON.stringify(result))
await gate.close()
`,
    )
    const { stdout } = await run(process.execPath, ['library.mjs'], { cwd: project })
    assert.equal(JSON.parse(stdout).ok, false)
  })
})
