/**
 * Issue #30: `npx tokengate serve` stopped with SIGTERM left the server running (npm passes
 * SIGTERM to the `sh -c` it runs the bin in; the shell dies of it and passes nothing on), an
 * orphan holding the port. The real `npx`, in a project whose node_modules hold tokengate:
 * the installed package under `npm run test:package` (TOKENGATE_TEST_PACKAGE), else a link
 * to this repository, as `npm install file:..` makes.
 */
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { delimiter, dirname, join } from 'node:path'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { collectOutput } from '../helpers/child-output.ts'
import { nodeUnderTest, PACKAGE_PROJECT } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

function skip(): string | false {
  const reason =
    process.platform !== 'linux'
      ? 'reads /proc (Linux)'
      : spawnSync('npx', ['--version']).status !== 0
        ? 'no npx on PATH'
        : undefined
  if (reason === undefined) return false
  if (process.env.CI === 'true') throw new Error(`CI=true but ${reason}`)
  return reason
}

/** A project with tokengate in node_modules: the installed package, or a link to the sources. */
function project(): string {
  if (PACKAGE_PROJECT) return PACKAGE_PROJECT
  const dir = tempDir('tg-npx-')
  writeFileSync(join(dir, 'package.json'), '{"name":"npx-consumer","private":true}')
  mkdirSync(join(dir, 'node_modules', '.bin'), { recursive: true })
  symlinkSync(ROOT, join(dir, 'node_modules', 'tokengate'))
  symlinkSync('../tokengate/bin/tokengate.js', join(dir, 'node_modules', '.bin', 'tokengate'))
  return dir
}

/** Every process below `pid` (from /proc). */
function descendants(pid: number): number[] {
  let children: number[] = []
  try {
    const text = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim()
    children = text === '' ? [] : text.split(' ').map(Number)
  } catch {}
  return children.flatMap((child) => [child, ...descendants(child)])
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

const refused = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(false)
    })
    socket.once('error', () => resolve(true))
  })

describe('npx tokengate serve', { skip: skip() }, () => {
  it('SIGTERM to npx stops the server: no orphan keeps the port', async (t) => {
    const cwd = project()
    const dataDir = tempDir('tg-npx-data-')
    const npx = spawn(
      'npx',
      [
        '--no-install',
        'tokengate',
        'serve',
        '--dev',
        '--http',
        '--listen',
        '127.0.0.1:0',
        '--json',
      ],
      {
        cwd,
        env: {
          PATH: `${dirname(nodeUnderTest())}${delimiter}${process.env.PATH}`,
          HOME: process.env.HOME,
          TOKENGATE_DATA_DIR: dataDir,
          TOKENGATE_WORKERS: '1',
          npm_config_update_notifier: 'false',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    )
    const { stdout, stderr } = collectOutput(npx)
    const below = new Set<number>()
    t.after(() => {
      for (const pid of below) if (alive(pid)) process.kill(pid, 'SIGKILL')
    })
    for (let i = 0; i < 1200 && npx.exitCode === null && !stdout().trim().endsWith('}'); i++) {
      for (const pid of descendants(npx.pid as number)) below.add(pid)
      await sleep(25)
    }
    assert.ok(stdout().trim().endsWith('}'), `serve did not start: ${stderr()}`)
    for (const pid of descendants(npx.pid as number)) below.add(pid)
    const port = Number(new URL((JSON.parse(stdout()) as { url: string }).url).port)
    assert.equal(await refused(port), false, 'serving')
    assert.ok(below.size >= 1, 'npx started the server below it')

    const npxExited = new Promise((resolve) => npx.once('exit', resolve))
    npx.kill('SIGTERM')
    await npxExited
    // The server drains (at most server.shutdownTimeoutMs + 5 s); then nothing npx started lives.
    for (let i = 0; i < 300 && [...below].some(alive); i++) await sleep(50)
    const left = [...below].filter(alive)
    t.diagnostic(
      `processes npx started still alive after its SIGTERM (waited up to 15 s): ${left.length}`,
    )
    assert.deepEqual(
      left,
      [],
      `orphans: ${left.map((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')).join('; ')}`,
    )
    assert.equal(await refused(port), true, 'the port is free')
  })
})
