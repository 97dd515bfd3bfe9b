/**
 * Signals to a real `tokengate serve`: operators and tools (logrotate, systemd `ExecReload`)
 * send SIGHUP to reload, and Node's default for SIGHUP is to exit. As PID 1 (a container) the
 * kernel drops every signal without a handler: stop signals must be caught from the start.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createServer as createHttpServer, request as httpRequest } from 'node:http'
import { type AddressInfo, createServer, type Socket } from 'node:net'
import { delimiter, dirname, join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { collectOutput } from '../helpers/child-output.ts'
import {
  nodeUnderTest,
  PACKAGE_PROJECT,
  type ServeProcess,
  serveProcess,
} from '../helpers/launch.ts'
import { AS_PID_1, namespacePids, pidNamespaceSkip } from '../helpers/pid-namespace.ts'
import { childrenOf, spawnServe } from '../helpers/serve-process.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { tempDataDir } from './helpers.ts'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

describe('tokengate serve (one process) and SIGHUP', () => {
  const data = tempDataDir()
  let served: ServeProcess
  let child: ChildProcess
  let url = ''
  const stderr = () => served.stderr()

  before(async () => {
    served = await serveProcess(['serve', '--dev', '--http', '--listen', '127.0.0.1:0', '--json'], {
      env: { TOKENGATE_DATA_DIR: data.dir, TOKENGATE_WORKERS: '1' },
    })
    child = served.child
    url = served.document.url
  })

  after(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    data.cleanup()
  })

  it('keeps serving after SIGHUP without a policy file, and says there was nothing to reload', async () => {
    child.kill('SIGHUP')
    for (let i = 0; i < 100 && !stderr().includes('SIGHUP'); i++) await sleep(50)
    assert.equal(child.exitCode, null, `serve exited on SIGHUP: ${stderr()}`)
    assert.equal(child.signalCode, null, `serve was killed by SIGHUP: ${stderr()}`)
    assert.match(stderr(), /SIGHUP: no gateway or decision policy file to reload/)
    const response = await fetch(new URL('/healthz', url))
    assert.equal(response.status, 200)
  })

  it('still stops gracefully on SIGTERM afterwards', async () => {
    child.kill('SIGTERM')
    assert.equal(await served.exited, 0)
  })
})

/** `tokengate serve --json` as PID 1 of a new PID namespace, as a container's entry point. */
async function serveAsPid1(args: readonly string[], env: Record<string, string>) {
  // The bin a user runs (the installed package's under TOKENGATE_TEST_PACKAGE): its
  // `env -S node` shebang execs node, so node itself is PID 1.
  const bin = PACKAGE_PROJECT
    ? join(PACKAGE_PROJECT, 'node_modules', '.bin', 'tokengate')
    : join(ROOT, 'bin', 'tokengate.js')
  const child = spawn(AS_PID_1[0], [...AS_PID_1.slice(1), bin, 'serve', ...args, '--json'], {
    cwd: PACKAGE_PROJECT ?? ROOT,
    env: { PATH: `${dirname(nodeUnderTest())}${delimiter}${process.env.PATH}`, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const { stdout, stderr } = collectOutput(child)
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => resolve(code)),
  )
  let pid: number | undefined
  for (let i = 0; i < 200 && pid === undefined; i++) {
    pid = childrenOf(child.pid as number)[0]
    if (pid === undefined) await sleep(10)
  }
  assert.ok(pid, `unshare started nothing: ${stderr()}`)
  assert.equal(namespacePids(pid).at(-1), 1, 'serve is PID 1 of its namespace')
  const started = async () => {
    for (let i = 0; i < 1200 && child.exitCode === null && !stdout().trim().endsWith('}'); i++) {
      await sleep(25)
    }
    assert.ok(stdout().trim().endsWith('}'), `serve did not start: ${stderr()}`)
    return JSON.parse(stdout()) as { url: string; devSeed?: { demoPat?: string } }
  }
  /** The exit code, or 'running' if it has not exited `withinMs` after the call. */
  const exitWithin = (withinMs: number) =>
    Promise.race([exited, sleep(withinMs).then(() => 'running' as const)])
  const kill = () => {
    if (child.exitCode === null) process.kill(pid as number, 'SIGKILL')
  }
  return { pid, started, exitWithin, kill, stderr }
}

describe('tokengate serve as PID 1 (a container)', { skip: pidNamespaceSkip() }, () => {
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGQUIT'] as const) {
    it(`stops gracefully on ${signal}: exit 0`, async (t) => {
      const data = tempDataDir()
      t.after(() => data.cleanup())
      const served = await serveAsPid1(['--dev', '--http', '--listen', '127.0.0.1:0'], {
        TOKENGATE_DATA_DIR: data.dir,
        TOKENGATE_WORKERS: '1',
      })
      t.after(served.kill)
      await served.started()
      process.kill(served.pid, signal)
      assert.equal(await served.exitWithin(20_000), 0, served.stderr())
      assert.match(served.stderr(), new RegExp(`${signal}, shutting down`))
    })
  }

  it('a SIGTERM while the start waits on a store that does not answer ends it at once, exit 0', async (t) => {
    const data = tempDataDir()
    t.after(() => data.cleanup())
    // Accepts connections and never answers: the start waits (5 s) for Postgres.
    const held: Socket[] = []
    const silent = createServer((socket) => {
      held.push(socket)
    })
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    t.after(() => {
      for (const socket of held) socket.destroy()
      silent.close()
    })
    const { port } = silent.address() as AddressInfo
    const served = await serveAsPid1(['--http', '--listen', '127.0.0.1:0'], {
      TOKENGATE_DATA_DIR: data.dir,
      TOKENGATE_WORKERS: '1',
      DATABASE_URL: `postgres://tokengate@127.0.0.1:${port}/tokengate`,
    })
    t.after(served.kill)
    // SIGTERM is sent once the start waits on the store and the server catches SIGTERM
    // (SigCgt of /proc/PID/status, bit 15): as PID 1, one sent earlier is dropped by design.
    const catchesTerm = () => {
      const mask = /^SigCgt:\s+([0-9a-f]+)/m.exec(
        readFileSync(`/proc/${served.pid}/status`, 'utf8'),
      )
      return ((BigInt(`0x${mask?.[1] ?? '0'}`) >> 14n) & 1n) === 1n
    }
    for (let i = 0; i < 400 && !(held.length > 0 && catchesTerm()); i++) await sleep(10)
    assert.ok(held.length > 0, `the start is waiting on the store: ${served.stderr()}`)
    assert.ok(catchesTerm(), 'the server catches SIGTERM')
    process.kill(served.pid, 'SIGTERM')
    assert.equal(await served.exitWithin(2_000), 0, served.stderr())
    assert.match(served.stderr(), /SIGTERM during start-up, exiting/)
  })

  it('drains on SIGTERM: an in-flight request is answered, audit events and usage counts are stored, exit 0', async (t) => {
    const data = tempDataDir()
    t.after(() => data.cleanup())
    // The upstream answers after 1 s: the request is in flight when SIGTERM arrives.
    const upstream = createHttpServer((_request, response) => {
      setTimeout(() => response.end('slow'), 1000)
    })
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
    t.after(() => upstream.close())
    const { port } = upstream.address() as AddressInfo
    const served = await serveAsPid1(
      ['--dev', '--http', '--listen', '127.0.0.1:0', '--upstream', `http://127.0.0.1:${port}`],
      { TOKENGATE_DATA_DIR: data.dir, TOKENGATE_WORKERS: '1' },
    )
    t.after(served.kill)
    const { url, devSeed } = await served.started()
    const pat = devSeed?.demoPat as string
    for (let i = 0; i < 10; i++) {
      assert.equal((await get(`${url}/api/v1/me`, `nope-${i}`)).status, 401)
    }
    for (let i = 0; i < 5; i++) assert.equal((await get(`${url}/api/v1/me`, pat)).status, 200)
    const slow = get(`${url}/api/v1/slow`, pat)
    await sleep(300)
    process.kill(served.pid, 'SIGTERM')
    const answer = await slow
    assert.deepEqual([answer.status, answer.body], [200, 'slow'])
    assert.equal(await served.exitWithin(20_000), 0, served.stderr())

    const db = new DatabaseSync(join(data.dir, 'tokengate.db'), { readOnly: true })
    t.after(() => db.close())
    const one = (sql: string) => Number(db.prepare(sql).get()?.n)
    assert.equal(one("SELECT count(*) AS n FROM audit_events WHERE type = 'auth.failed'"), 10)
    assert.equal(
      one(
        "SELECT sum(allowed) AS n FROM usage_counts WHERE scope = 'all' AND resolution = 'minute'",
      ),
      6,
    )
    assert.equal(
      one(
        "SELECT sum(unauthorized) AS n FROM usage_counts WHERE scope = 'all' AND resolution = 'minute'",
      ),
      10,
    )
    const left = readdirSync(join(data.dir, 'audit-spool')).filter((name) =>
      name.endsWith('.jsonl'),
    )
    assert.deepEqual(left, [], 'everything flushed: no spool segment left for a replay')
  })

  it('leaves no zombie: a SIGKILLed worker of PID 1 is reaped and replaced', async (t) => {
    const data = tempDataDir()
    t.after(() => data.cleanup())
    const served = await serveAsPid1(['--dev', '--http', '--listen', '127.0.0.1:0'], {
      TOKENGATE_DATA_DIR: data.dir,
      TOKENGATE_WORKERS: '2',
    })
    t.after(served.kill)
    await served.started()
    const before = childrenOf(served.pid)
    assert.equal(before.length, 2)
    process.kill(before[0] as number, 'SIGKILL')
    const state = (pid: number) =>
      /^State:\s+(\S)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
    let now: number[] = []
    for (let i = 0; i < 200; i++) {
      now = childrenOf(served.pid)
      if (now.length === 2 && !now.includes(before[0] as number)) break
      await sleep(25)
    }
    assert.equal(now.length, 2, 'the killed worker was replaced')
    assert.ok(!now.includes(before[0] as number), 'the killed worker is gone (reaped)')
    assert.deepEqual(
      now.map(state).filter((s) => s === 'Z'),
      [],
    )
    process.kill(served.pid, 'SIGTERM')
    assert.equal(await served.exitWithin(30_000), 0, served.stderr())
  })
})

/** One GET on a fresh connection: status and body. */
function get(url: string, token: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      url,
      { agent: false, headers: { authorization: `Bearer ${token}` } },
      (response) => {
        let body = ''
        response.on('data', (chunk: Buffer) => {
          body += chunk
        })
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }))
      },
    )
    request.on('error', reject)
    request.end()
  })
}

describe('a shutdown whose flush cannot finish', { skip: skipReason('postgres') }, () => {
  let postgres: PostgresServer
  before(async () => {
    postgres = await startPostgres()
  })
  after(() => postgres?.stop())

  /** Postgres' processes: the postmaster (first line of postmaster.pid) and its children. */
  const postgresPids = () => {
    const main = Number(
      readFileSync(join(postgres.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0],
    )
    return [main, ...childrenOf(main)]
  }

  it('ends within server.shutdownTimeoutMs + 5 s (exit 1), and the next start stores what it held', async (t) => {
    const data = tempDataDir()
    t.after(() => data.cleanup())
    const databaseUrl = await postgres.createDatabase()
    const configFile = join(data.dir, 'config.json')
    writeFileSync(
      configFile,
      JSON.stringify({ rateLimit: { enabled: false }, server: { shutdownTimeoutMs: 1000 } }),
    )
    const env = {
      TOKENGATE_CONFIG: configFile,
      TOKENGATE_DATA_DIR: data.dir,
      TOKENGATE_WORKERS: '1',
      DATABASE_URL: databaseUrl,
    }
    const served = await spawnServe({ env, args: ['--http', '--listen', '127.0.0.1:0'] })
    t.after(() => served.stop())
    for (let i = 0; i < 7; i++) {
      assert.equal((await get(`${served.url}/api/v1/me`, `nope-${i}`)).status, 401)
    }
    // Postgres stops answering (every process of it stopped): the flushes wait forever.
    const stopped = postgresPids()
    for (const pid of stopped) process.kill(pid, 'SIGSTOP')
    const resume = () => {
      for (const pid of stopped) {
        try {
          process.kill(pid, 'SIGCONT')
        } catch {} // exited meanwhile
      }
    }
    t.after(resume)
    const exited = new Promise<number | null>((resolve) => served.child.once('exit', resolve))
    const asked = Date.now()
    served.child.kill('SIGTERM')
    const code = await Promise.race([exited, sleep(20_000).then(() => 'running' as const)])
    const tookMs = Date.now() - asked
    t.diagnostic(`exit ${code} ${tookMs} ms after SIGTERM (shutdownTimeoutMs 1000)`)
    assert.equal(code, 1, served.stderr())
    assert.ok(tookMs < 1000 + 5000 + 3000, `${tookMs} ms`)
    assert.match(served.stderr(), /still flushing after 6000 ms/)

    resume()
    const next = await spawnServe({ env, args: ['--http', '--listen', '127.0.0.1:0'] })
    t.after(() => next.stop())
    const client = new pg.Client({ connectionString: databaseUrl })
    await client.connect()
    t.after(() => client.end())
    const failed = async () =>
      Number(
        (await client.query("SELECT count(*) AS n FROM audit_events WHERE type = 'auth.failed'"))
          .rows[0].n,
      )
    for (let i = 0; i < 100 && (await failed()) < 7; i++) await sleep(100)
    assert.equal(await failed(), 7, 'the audit spool kept them')
  })
})
