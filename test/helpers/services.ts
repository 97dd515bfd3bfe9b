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
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'

export type Service =
  | 'postgres'
  | 'pgbouncer'
  | 'redis'
  | 'redis-sentinel'
  | 'nginx'
  | 'nginx-perl'
  | 'nginx-lua'
  | 'caddy'
  | 'chromium'

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

/** A running throwaway PgBouncer in front of one Postgres. */
export interface PgBouncerServer {
  /** `postgres://postgres@127.0.0.1:<port>/<database>` through the bouncer. */
  urlFor(database: string): string
  readonly port: number
  stop(): Promise<void>
}

/** A running throwaway Redis (no persistence). */
export interface RedisServer {
  readonly url: string
  readonly port: number
  stop(): Promise<void>
  /** SIGKILL, as a crash (the directory is removed by `stop`). */
  kill(): Promise<void>
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
        return acceptsQueries(url)
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
export async function startRedis(extraArgs: readonly string[] = []): Promise<RedisServer> {
  const reason = skipReason('redis')
  if (reason) throw new Error(reason)
  const root = mkdtempSync(join(tmpdir(), 'tokengate-redis-'))
  const port = await freePort()
  const args = [
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
    ...extraArgs,
  ]
  const server = await spawnRedis('redis-server', args, root, port)
  return { url: `redis://127.0.0.1:${port}`, port, stop: server.stop, kill: server.kill }
}

/** One redis-server or redis-sentinel process, ready once it answers PING. */
async function spawnRedis(
  binary: 'redis-server' | 'redis-sentinel',
  args: readonly string[],
  root: string,
  port: number,
): Promise<{ stop(): Promise<void>; kill(): Promise<void> }> {
  let output = ''
  const proc = spawn(binaryPath(binary) ?? binary, args, {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  for (const stream of [proc.stdout, proc.stderr]) {
    stream?.setEncoding('utf8').on('data', (chunk: string) => {
      output = (output + chunk).slice(-4000)
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
          throw new Error(`${binary} exited during start-up: ${output}`)
        }
        return (await redisPing(port)) === '+PONG'
      },
      `${binary} on port ${port}`,
      () => output,
    )
  } catch (error) {
    await stop()
    throw error
  }
  // SIGKILL: a crash, for failover tests (the directory goes with stop()).
  const kill = () => stopProcess(proc, 'SIGKILL')
  return { stop, kill }
}

/** A master, one replica and one sentinel (quorum 1) watching them as `name`. */
export interface RedisSentinelSetup {
  /** `redis-sentinel://127.0.0.1:<sentinel port>/<name>` */
  readonly url: string
  readonly name: string
  readonly master: RedisServer
  readonly replica: RedisServer
  readonly sentinelPort: number
  stop(): Promise<void>
}

/**
 * Sentinel with fast failover (the master is down after 500 ms without answers), for tests
 * that kill the master under load. A sentinel needs a config file it may rewrite.
 */
export async function startRedisSentinel(): Promise<RedisSentinelSetup> {
  const reason = skipReason('redis-sentinel')
  if (reason) throw new Error(reason)
  const name = 'tokengate'
  const master = await startRedis()
  const replica = await startRedis(['--replicaof', '127.0.0.1', String(master.port)])
  // In sync before anyone counts: a failover must lose only what replication had not sent.
  await waitUntil(
    async () =>
      execFileSync('redis-cli', ['-p', String(replica.port), 'info', 'replication'], {
        encoding: 'utf8',
      }).includes('master_link_status:up'),
    `replica of ${master.port} in sync`,
    () => '',
  )
  const root = mkdtempSync(join(tmpdir(), 'tokengate-sentinel-'))
  const sentinelPort = await freePort()
  const conf = join(root, 'sentinel.conf')
  writeFileSync(
    conf,
    [
      `port ${sentinelPort}`,
      'bind 127.0.0.1',
      `dir ${root}`,
      `sentinel monitor ${name} 127.0.0.1 ${master.port} 1`,
      `sentinel down-after-milliseconds ${name} 500`,
      `sentinel failover-timeout ${name} 3000`,
      `sentinel parallel-syncs ${name} 1`,
      '',
    ].join('\n'),
  )
  let sentinel: Awaited<ReturnType<typeof spawnRedis>> | undefined
  try {
    sentinel = await spawnRedis('redis-sentinel', [conf], root, sentinelPort)
  } catch (error) {
    await replica.stop()
    await master.stop()
    throw error
  }
  return {
    url: `redis-sentinel://127.0.0.1:${sentinelPort}/${name}`,
    name,
    master,
    replica,
    sentinelPort,
    async stop() {
      await sentinel?.stop()
      await replica.stop()
      await master.stop()
    },
  }
}

/** A Redis Cluster of 3 masters, each with one replica, on 127.0.0.1. */
export interface RedisClusterSetup {
  /** `redis-cluster://127.0.0.1:<port>,...` (every node as a seed). */
  readonly url: string
  readonly nodes: readonly RedisServer[]
  stop(): Promise<void>
}

/** Six nodes (cluster-node-timeout 1 s, so a failover takes ~2 s), joined by `redis-cli --cluster create`. */
export async function startRedisCluster(): Promise<RedisClusterSetup> {
  const reason = skipReason('redis')
  if (reason) throw new Error(reason)
  const nodes: RedisServer[] = []
  const stopAll = async () => {
    for (const node of nodes) await node.stop()
  }
  try {
    for (let i = 0; i < 6; i++) {
      nodes.push(
        await startRedis([
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          `nodes-${i}.conf`,
          '--cluster-node-timeout',
          '1000',
        ]),
      )
    }
    execFileSync(
      findOnPath('redis-cli') ?? 'redis-cli',
      [
        '--cluster',
        'create',
        ...nodes.map((node) => `127.0.0.1:${node.port}`),
        '--cluster-replicas',
        '1',
        '--cluster-yes',
      ],
      { stdio: 'pipe', timeout: 30_000 },
    )
    for (const node of nodes) {
      await waitUntil(
        async () => {
          const cli = (...args: string[]) =>
            execFileSync('redis-cli', ['-p', String(node.port), ...args], { encoding: 'utf8' })
          const replication = cli('info', 'replication')
          // Replicas in sync: one that never synced is not promoted when its master dies.
          return (
            cli('cluster', 'info').includes('cluster_state:ok') &&
            (replication.includes('role:master') || replication.includes('master_link_status:up'))
          )
        },
        `cluster node ${node.port} ready`,
        () => '',
      )
    }
  } catch (error) {
    await stopAll()
    throw error
  }
  return {
    url: `redis-cluster://${nodes.map((node) => `127.0.0.1:${node.port}`).join(',')}`,
    nodes,
    stop: stopAll,
  }
}

/**
 * Starts PgBouncer (Debian package `pgbouncer`) in front of `postgres`, in `poolMode`
 * (default `transaction`, what production setups run), every database passed through, any
 * user accepted (the Postgres behind trusts 127.0.0.1). Resolves once it accepts queries.
 */
export async function startPgBouncer(
  postgres: Pick<PostgresServer, 'port'>,
  options: {
    poolMode?: 'session' | 'transaction'
    poolSize?: number
    /** Seconds PgBouncer waits before logging in to Postgres again after a failure (15). */
    serverLoginRetrySec?: number
  } = {},
): Promise<PgBouncerServer> {
  const reason = skipReason('pgbouncer')
  if (reason) throw new Error(reason)
  const owner = postgresOwner()
  const root = mkdtempSync(join(tmpdir(), 'tokengate-pgbouncer-'))
  if (owner) chownSync(root, owner.uid, owner.gid)
  const port = await freePort()
  const ini = join(root, 'pgbouncer.ini')
  writeFileSync(
    ini,
    [
      '[databases]',
      `* = host=127.0.0.1 port=${postgres.port} user=postgres`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = any',
      `pool_mode = ${options.poolMode ?? 'transaction'}`,
      `default_pool_size = ${options.poolSize ?? 10}`,
      'max_client_conn = 500',
      'server_reset_query =',
      ...(options.serverLoginRetrySec === undefined
        ? []
        : [`server_login_retry = ${options.serverLoginRetrySec}`]),
      '',
    ].join('\n'),
  )
  if (owner) chownSync(ini, owner.uid, owner.gid)
  let log = ''
  // PgBouncer refuses to run as root, like Postgres.
  const proc = spawn(binaryPath('pgbouncer') as string, [ini], {
    ...(owner ? { uid: owner.uid, gid: owner.gid } : {}),
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  for (const stream of [proc.stdout, proc.stderr]) {
    stream?.setEncoding('utf8').on('data', (chunk: string) => {
      log = (log + chunk).slice(-4000)
    })
  }
  let stopped = false
  const stop = async (): Promise<void> => {
    if (stopped) return
    stopped = true
    await stopProcess(proc, 'SIGINT')
    rmSync(root, { recursive: true, force: true })
  }
  const urlFor = (database: string) => `postgres://postgres@127.0.0.1:${port}/${database}`
  try {
    await waitUntil(
      async () => {
        if (proc.exitCode !== null || proc.signalCode !== null) {
          throw new Error(`pgbouncer exited during start-up: ${log}`)
        }
        return acceptsQueries(urlFor('postgres'))
      },
      `pgbouncer on port ${port}`,
      () => log,
    )
  } catch (error) {
    await stop()
    throw error
  }
  return { urlFor, port, stop }
}

/** Whether a Postgres (or PgBouncer) at `url` answers a query now. */
async function acceptsQueries(url: string): Promise<boolean> {
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
  pgbouncer: () =>
    postgresUnavailable() ??
    (binaryPath('pgbouncer') ? undefined : 'no pgbouncer binary (apt-get install pgbouncer)'),
  redis: redisUnavailable,
  'redis-sentinel': () =>
    redisUnavailable() ??
    (binaryPath('redis-sentinel')
      ? undefined
      : 'no redis-sentinel binary (apt-get install redis-sentinel)'),
  nginx: () => (binaryPath('nginx') ? undefined : 'no nginx binary (apt-get install nginx)'),
  // The decision cache's credential digest (examples/forward-auth/nginx.conf, perl_set).
  'nginx-perl': () =>
    (binaryPath('nginx') ? undefined : 'no nginx binary (apt-get install nginx)') ??
    (existsSync('/usr/lib/nginx/modules/ngx_http_perl_module.so')
      ? undefined
      : 'no nginx perl module (apt-get install libnginx-mod-http-perl)'),
  // examples/forward-auth/nginx-lua.conf (decisions kept in a Lua shared dict).
  'nginx-lua': () =>
    (binaryPath('nginx') ? undefined : 'no nginx binary (apt-get install nginx)') ??
    (existsSync('/usr/lib/nginx/modules/ngx_http_lua_module.so')
      ? undefined
      : 'no nginx Lua module (apt-get install libnginx-mod-http-lua)'),
  caddy: () => (binaryPath('caddy') ? undefined : 'no caddy binary (apt-get install caddy)'),
  chromium: () =>
    binaryPath('chromium') ? undefined : 'no chromium binary (apt-get install chromium)',
}

/**
 * The absolute path of a proxy or browser binary: PATH first, then the sbin directories
 * Debian installs nginx into (absent from a non-root PATH).
 */
export function binaryPath(
  name: 'nginx' | 'caddy' | 'chromium' | 'pgbouncer' | 'redis-sentinel' | 'redis-server',
): string | undefined {
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
