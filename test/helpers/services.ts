/**
 * Throwaway Postgres and Redis servers for tests, started from the installed binaries into
 * a temporary directory on a free 127.0.0.1 port, so tests never touch a machine's own
 * services (e.g. the cluster the Debian package creates on 5432).
 *
 * When a binary is missing, `skipReason(service)` returns a printable reason for
 * `describe(name, { skip })`; under `CI=true` it throws instead, so a CI image that lost
 * its packages fails loudly rather than passing with the suites skipped.
 *
 * @example
 * const skip = skipReason('postgres')
 * describe('postgres store', { skip }, () => {
 *   let pg: PostgresServer
 *   before(async () => { pg = await startPostgres() })
 *   after(() => pg.stop())
 * })
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { createConnection, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'

export type Service = 'postgres' | 'redis' | 'nginx' | 'caddy' | 'chromium'

/** A running throwaway Postgres. */
export interface PostgresServer {
  /** Superuser URL of the `postgres` database (trust auth, TCP on 127.0.0.1). */
  readonly url: string
  readonly port: number
  readonly dataDir: string
  /** Creates a fresh, empty database (`t_<random>`) and returns its URL. */
  createDatabase(): Promise<string>
  /**
   * Stops the server process but keeps its data directory and port, for outage tests.
   * `fast` disconnects clients and shuts down cleanly; `immediate` aborts like a crash.
   */
  halt(mode?: 'fast' | 'immediate'): Promise<void>
  /** Starts the halted server again on the same data directory and port; waits until ready. */
  start(): Promise<void>
  /** Stops the server (if running) and removes its directory. Idempotent. */
  stop(): Promise<void>
}

/** A running throwaway Redis (no persistence). */
export interface RedisServer {
  readonly url: string
  readonly port: number
  stop(): Promise<void>
}

const READY_TIMEOUT_MS = 30_000

/**
 * Why the suites for `service` cannot run here, or `false` when they can.
 * Throws under `CI=true` when the service is unavailable.
 */
export function skipReason(service: Service): string | false {
  const reason = unavailable[service]()
  if (reason === undefined) return false
  if (process.env.CI === 'true') {
    throw new Error(`CI=true but ${service} cannot be started: ${reason}`)
  }
  return `${service} unavailable: ${reason}`
}

/** Starts a Postgres cluster in a new temporary directory; resolves once it accepts queries. */
export async function startPostgres(): Promise<PostgresServer> {
  const reason = skipReason('postgres')
  if (reason) throw new Error(reason)
  const bin = findPostgresBinDir() as string
  const owner = postgresOwner()
  const root = mkdtempSync(join(tmpdir(), 'tokengate-pg-'))
  const dataDir = join(root, 'data')
  // Postgres refuses to run as root: when we are root, everything runs as the `postgres`
  // system user, which therefore has to own the directory.
  if (owner) chownSync(root, owner.uid, owner.gid)
  const spawnOptions = owner ? { uid: owner.uid, gid: owner.gid } : {}
  try {
    execFileSync(
      join(bin, 'initdb'),
      ['-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-locale', '--no-sync'],
      { ...spawnOptions, cwd: root, stdio: 'pipe', env: { ...process.env, LC_ALL: 'C' } },
    )
  } catch (error) {
    rmSync(root, { recursive: true, force: true })
    throw new Error(`initdb failed: ${String((error as { stderr?: unknown }).stderr ?? error)}`)
  }

  const port = await freePort()
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`
  let child: ChildProcess | undefined
  let stderr = ''

  const start = async (): Promise<void> => {
    if (child) return
    stderr = ''
    // fsync off makes DDL-heavy tests fast and loses nothing unless the machine itself
    // crashes. synchronous_commit stays on: with it off, halt('immediate') would lose the
    // last commits, and outage tests must find committed data after a restart.
    const proc = spawn(
      join(bin, 'postgres'),
      [
        '-D',
        dataDir,
        '-p',
        String(port),
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        `unix_socket_directories=${root}`,
        '-c',
        'fsync=off',
        '-c',
        'full_page_writes=off',
        '-c',
        'max_connections=300',
      ],
      { ...spawnOptions, cwd: root, stdio: ['ignore', 'ignore', 'pipe'] },
    )
    proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-4000)
    })
    child = proc
    proc.once('exit', () => {
      if (child === proc) child = undefined
    })
    await waitUntil(
      async () => {
        if (proc.exitCode !== null || proc.signalCode !== null) {
          throw new Error(`postgres exited during start-up: ${stderr}`)
        }
        const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 })
        client.on('error', () => {})
        try {
          await client.connect()
          await client.query('SELECT 1')
          return true
        } catch {
          return false
        } finally {
          await client.end().catch(() => {})
        }
      },
      `postgres on port ${port}`,
      () => stderr,
    )
  }

  const halt = async (mode: 'fast' | 'immediate' = 'fast'): Promise<void> => {
    const proc = child
    if (!proc) return
    // SIGINT = fast shutdown (clients disconnected, clean checkpoint); SIGQUIT = immediate.
    await stopProcess(proc, mode === 'fast' ? 'SIGINT' : 'SIGQUIT')
  }

  let stopped = false
  const server: PostgresServer = {
    url,
    port,
    dataDir,
    async createDatabase() {
      const name = `t_${randomBytes(6).toString('hex')}`
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      try {
        await client.query(`CREATE DATABASE ${name}`)
      } finally {
        await client.end()
      }
      return `postgres://postgres@127.0.0.1:${port}/${name}`
    },
    halt,
    start,
    async stop() {
      if (stopped) return
      stopped = true
      await halt('immediate')
      rmSync(root, { recursive: true, force: true })
    },
  }
  try {
    await start()
  } catch (error) {
    await server.stop()
    throw error
  }
  return server
}

/** Starts a Redis server without persistence; resolves once it answers PING. */
export async function startRedis(): Promise<RedisServer> {
  const reason = skipReason('redis')
  if (reason) throw new Error(reason)
  const root = mkdtempSync(join(tmpdir(), 'tokengate-redis-'))
  const port = await freePort()
  let stderr = ''
  const proc = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      root,
    ],
    { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
  )
  for (const stream of [proc.stdout, proc.stderr]) {
    stream?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-4000)
    })
  }
  let stopped = false
  const stop = async (): Promise<void> => {
    if (stopped) return
    stopped = true
    await stopProcess(proc, 'SIGTERM')
    rmSync(root, { recursive: true, force: true })
  }
  try {
    await waitUntil(
      async () => {
        if (proc.exitCode !== null || proc.signalCode !== null) {
          throw new Error(`redis-server exited during start-up: ${stderr}`)
        }
        return (await redisPing(port)) === '+PONG'
      },
      `redis on port ${port}`,
      () => stderr,
    )
  } catch (error) {
    await stop()
    throw error
  }
  return { url: `redis://127.0.0.1:${port}`, port, stop }
}

function postgresUnavailable(): string | undefined {
  if (!findPostgresBinDir()) {
    return 'no initdb/postgres binaries in /usr/lib/postgresql/*/bin or on PATH (apt-get install postgresql)'
  }
  if (process.getuid?.() === 0 && !postgresOwner()) {
    return 'running as root and there is no `postgres` system user to run the server as'
  }
  return undefined
}

const unavailable: Record<Service, () => string | undefined> = {
  postgres: postgresUnavailable,
  redis: redisUnavailable,
  nginx: () => (binaryPath('nginx') ? undefined : 'no nginx binary (apt-get install nginx)'),
  caddy: () => (binaryPath('caddy') ? undefined : 'no caddy binary (apt-get install caddy)'),
  chromium: () =>
    binaryPath('chromium') ? undefined : 'no chromium binary (apt-get install chromium)',
}

/**
 * The absolute path of a proxy or browser binary: PATH first, then the sbin directories
 * Debian installs nginx into (absent from a non-root PATH).
 */
export function binaryPath(name: 'nginx' | 'caddy' | 'chromium'): string | undefined {
  return (
    findOnPath(name) ??
    ['/usr/sbin', '/usr/bin'].map((dir) => join(dir, name)).find((path) => existsSync(path))
  )
}

function redisUnavailable(): string | undefined {
  return findOnPath('redis-server')
    ? undefined
    : 'no redis-server on PATH (apt-get install redis-server)'
}

/** The newest `/usr/lib/postgresql/<major>/bin` (Debian layout), else the directory on PATH. */
function findPostgresBinDir(): string | undefined {
  const base = '/usr/lib/postgresql'
  if (existsSync(base)) {
    const majors = readdirSync(base)
      .filter((name) => /^\d+$/.test(name))
      .sort((a, b) => Number(b) - Number(a))
    for (const major of majors) {
      const dir = join(base, major, 'bin')
      if (existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres'))) return dir
    }
  }
  const initdb = findOnPath('initdb')
  if (initdb) {
    const dir = initdb.slice(0, -'/initdb'.length)
    if (existsSync(join(dir, 'postgres'))) return dir
  }
  return undefined
}

function findOnPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, name))) return join(dir, name)
  }
  return undefined
}

/** The uid/gid to run Postgres as when we are root; undefined when we are not root. */
function postgresOwner(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim())
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim())
    return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : undefined
  } catch {
    return undefined
  }
}

/** A port the OS just handed out on 127.0.0.1 (closed again: a tiny race, fine for tests). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

/** Sends a raw RESP PING and returns the first reply line ('' on any error). */
function redisPing(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port })
    let reply = ''
    socket.setTimeout(1000, () => socket.destroy())
    socket.on('connect', () => socket.write('PING\r\n'))
    socket.on('data', (data) => {
      reply += data.toString('utf8')
      if (reply.includes('\r\n')) socket.end()
    })
    socket.on('error', () => {})
    socket.on('close', () => resolve(reply.split('\r\n')[0] ?? ''))
  })
}

async function waitUntil(
  ready: () => Promise<boolean>,
  what: string,
  log: () => string,
): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS
  while (!(await ready())) {
    if (Date.now() > deadline) {
      throw new Error(`${what} not ready after ${READY_TIMEOUT_MS} ms: ${log()}`)
    }
    await sleep(50)
  }
}

/** Signals a child and waits for it to exit; escalates to SIGKILL after 10 s. */
async function stopProcess(proc: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
  proc.kill(signal)
  const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000)
  await exited
  clearTimeout(timer)
}
