/**
 * The decision listener on a Unix socket (decision.socket, docs/forward-auth.md): real nginx
 * with the shipped example asks through `server unix:<path>`; the socket has the configured
 * mode; a second instance cannot take a socket someone listens on, a dead process's socket is
 * replaced, anything else at the path is left alone; the file is gone after stop.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { ConfigError, loadConfig } from '../../src/config/load.ts'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'
import { launchTokengate } from '../helpers/launch.ts'
import { skipReason } from '../helpers/services.ts'
import { type ProxyProcess, type Stack, startNginx, startStack } from './harness.ts'

const tempDir = () => mkdtempSync(join(tmpdir(), 'tg-decision-sock-'))

/** A minimal server whose decision listener is on `path` (no nginx needed). */
function launchOnSocket(dataDir: string, path: string, mode?: string) {
  return launchTokengate({
    dataDir,
    server: { host: '127.0.0.1', port: 0, plainHttp: true },
    log: { level: 'silent' },
    decision: { port: 0, proxy: 'nginx', socket: { path, ...(mode ? { mode } : {}) } },
  })
}

describe('nginx asks the decision listener on a Unix socket', { skip: skipReason('nginx') }, () => {
  const dir = tempDir()
  const path = join(dir, 'decision.sock')
  let stack: Stack
  let front: ProxyProcess
  before(async () => {
    stack = await startStack({ proxy: 'nginx', socket: path })
    front = await startNginx(
      { decision: 0, upstream: stack.upstream.port },
      { decisionSocket: path },
    )
  })
  after(async () => {
    await front?.stop()
    await stack?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  test('listens on the path with mode 0660, not on a port', () => {
    assert.equal(stack.decisionUrl, `unix:${path}`)
    const stat = lstatSync(path)
    assert.ok(stat.isSocket())
    assert.equal(stat.mode & 0o777, 0o660)
  })

  test('an allowed PAT reaches the upstream with its identity, through nginx', async () => {
    const seen = stack.upstream.seen.length
    const res = await rawRequest(front.url, PROTECTED_PATH, [
      ['Authorization', `Bearer ${stack.tokens.pat}`],
    ])
    assert.equal(res.status, 200, front.log())
    const upstream = stack.upstream.seen[seen]
    // nginx is believed (X-Original-URI decided on the policy's path), as over TCP.
    assert.equal(upstream?.headers['x-auth-subject'], 'ci-bot')
    assert.equal(upstream?.headers['x-auth-token-type'], 'pat')
    assert.equal(upstream?.headers.authorization, undefined)
  })

  test('a refusal comes back as the problem tokengate wrote, and nothing goes upstream', async () => {
    const seen = stack.upstream.seen.length
    const res = await rawRequest(front.url, PROTECTED_PATH, [
      ['Authorization', `Bearer ${stack.tokens.revokedPat}`],
    ])
    assert.equal(res.status, 401, front.log())
    assert.match(String(res.headers['content-type']), /^application\/problem\+json/)
    assert.equal(JSON.parse(res.text).status, 401)
    assert.equal(res.headers['x-request-id'], JSON.parse(res.text).requestId)
    assert.match(String(res.headers['www-authenticate']), /^Bearer/)
    assert.equal(stack.upstream.seen.length, seen)
  })

  test('a second instance cannot take the socket, and the first keeps answering', async () => {
    const dataDir = tempDir()
    try {
      await assert.rejects(
        launchOnSocket(dataDir, path),
        /decision listener \(decision\.socket\.path\) cannot listen on unix:.*another process listens on it/,
      )
      const res = await rawRequest(front.url, PROTECTED_PATH, [
        ['Authorization', `Bearer ${stack.tokens.pat}`],
      ])
      assert.equal(res.status, 200)
    } finally {
      rmSync(dataDir, { recursive: true, force: true })
    }
  })
})

describe('the decision socket file', () => {
  test('a dead process’s socket is replaced; the file is removed at stop; mode as configured', async () => {
    const dir = tempDir()
    const path = join(dir, 'decision.sock')
    try {
      // A process that listens on the path and is killed: its socket file stays behind.
      const child = spawn(
        process.execPath,
        [
          '-e',
          `require('node:net').createServer().listen(${JSON.stringify(path)}, () => console.log('up'))`,
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      )
      await new Promise((resolve) => child.stdout.once('data', resolve))
      child.kill('SIGKILL')
      await new Promise((resolve) => child.once('exit', resolve))
      assert.ok(lstatSync(path).isSocket(), 'the killed process left its socket file')
      const running = await launchOnSocket(dir, path, '0600')
      assert.equal(running.decisionUrl, `unix:${path}`)
      assert.equal(lstatSync(path).mode & 0o777, 0o600)
      await running.close()
      assert.equal(existsSync(path), false, 'the socket file is removed at stop')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('a file that is not a socket is left alone and the start fails', async () => {
    const dir = tempDir()
    const path = join(dir, 'decision.sock')
    try {
      writeFileSync(path, 'keep me')
      await assert.rejects(launchOnSocket(dir, path), /exists and is not a socket \(not removed\)/)
      assert.equal(readFileSync(path, 'utf8'), 'keep me')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('the configuration says what is wrong with it', () => {
    const problems = (decision: Record<string, unknown>, server: Record<string, unknown> = {}) => {
      try {
        loadConfig({ env: {}, overrides: { server: { plainHttp: true, ...server }, decision } })
        return []
      } catch (error) {
        assert.ok(error instanceof ConfigError)
        return error.message
      }
    }
    assert.match(
      String(problems({ proxy: 'nginx', socket: { path: 'run/decision.sock' } })),
      /\/decision\/socket\/path: "run\/decision.sock" must be an absolute path/,
    )
    assert.match(
      String(problems({ proxy: 'nginx', socket: { path: `/${'x'.repeat(120)}` } })),
      /\/decision\/socket\/path: 121 bytes is longer than a Unix socket path may be/,
    )
    assert.match(
      String(problems({ trustedProxies: ['127.0.0.1=nginx'], socket: { path: '/run/d.sock' } })),
      /\/decision\/socket: set decision\.proxy/,
    )
    assert.match(
      String(problems({ proxy: 'nginx', socket: { path: '/run/d.sock', mode: 'rw' } })),
      /\/decision\/socket\/mode/,
    )
    assert.match(
      String(problems({ proxy: 'nginx', socket: { path: '/run/d.sock' } }, { workers: 2 })),
      /\/decision\/socket: needs server\.workers: 1/,
    )
    assert.deepEqual(problems({ proxy: 'nginx', socket: { path: '/run/d.sock' } }), [])
  })
})
