/**
 * What an instance says as it starts, for the operator reading its first log lines: the store
 * (SQLite file, or Postgres user@host:port/database), the rate-limit counters (Redis
 * host:port, or in-process), the gateway's upstream, and each listener with its real scheme
 * and role. Database and Redis URLs are reduced to their location: their password (and any
 * query parameter) never reaches a log line.
 *
 * A listener that cannot start fails the whole start with one line naming it and its
 * settings (`listenAs`), so that `serve` is never left half-started.
 */
import { join, resolve } from 'node:path'
import { parseRedisUrl } from './auth/redis-client.ts'
import type { Config } from './config/schema.ts'
import { SQLITE_FILE_NAME } from './stores/open-store.ts'

/** One start-up log line: pino fields and a message. */
export interface StartupLine {
  readonly fields: Record<string, unknown>
  readonly msg: string
}

/** Each listener's role, as the start-up lines and failures name it, and its settings. */
export const LISTENERS = {
  api: { role: 'API', settings: 'server.host, server.port', serves: '/api/v1, /healthz, /readyz' },
  decision: {
    role: 'decision',
    settings: 'decision.host, decision.port',
    serves: 'forward-auth decisions for a proxy',
  },
  decisionSocket: {
    role: 'decision',
    settings: 'decision.socket.path',
    serves: 'forward-auth decisions for a proxy',
  },
  decisionGrpc: {
    role: 'decision gRPC',
    settings: 'decision.host, decision.grpcPort',
    serves: 'Envoy ext_authz envoy.service.auth.v3.Authorization/Check, plaintext HTTP/2',
  },
  admin: {
    role: 'admin',
    settings: 'admin.host, admin.port',
    serves: 'console /admin/, admin API /admin/api/v1',
  },
  metrics: { role: 'metrics', settings: 'metrics.host, metrics.port', serves: '/metrics' },
} as const

export type ListenerName = keyof typeof LISTENERS

const LISTEN_ERRORS: Readonly<Record<string, string>> = {
  EADDRINUSE: 'address already in use',
  EADDRNOTAVAIL: 'no such address on this machine',
  EACCES: 'permission denied (ports below 1024 need privileges)',
}

/** `listening on <url>: <role> (<what it serves>)`, the line each listener logs once up. */
export function listeningLine(name: ListenerName, url: string): string {
  const { role, serves } = LISTENERS[name]
  return `listening on ${url}: ${role} (${serves})`
}

/**
 * Runs `start` (which listens) and rewrites its failure as one line naming the listener and
 * its settings, e.g. `admin listener (admin.host, admin.port) cannot listen on
 * 127.0.0.1:9443: address already in use`.
 */
export async function listenAs<T>(name: ListenerName, start: () => Promise<T>): Promise<T> {
  try {
    return await start()
  } catch (error) {
    const { role, settings } = LISTENERS[name]
    const { syscall, code, address, port, message } = error as NodeJS.ErrnoException & {
      address?: string
      port?: number
    }
    // `listen` in one process; `bind` when a node:cluster worker's primary binds for it.
    const reason =
      (syscall === 'listen' || syscall === 'bind') && address !== undefined
        ? `cannot listen on ${address}:${port}: ${LISTEN_ERRORS[code ?? ''] ?? message}`
        : message
    throw new Error(`${role} listener (${settings}) ${reason}`, { cause: error })
  }
}

/** The store an instance opens: `store: sqlite /abs/tokengate.db` or `store: postgres ...`. */
export function storeLine(config: Readonly<Config>): StartupLine {
  if (!config.databaseUrl) {
    const file = join(resolve(config.dataDir), SQLITE_FILE_NAME)
    return { fields: { store: 'sqlite', file }, msg: `store: sqlite ${file}` }
  }
  const at = location(config.databaseUrl, 5432)
  const database = at.path || '(the user name)'
  return {
    fields: { store: 'postgres', host: at.host, port: at.port, database, user: at.user },
    msg: `store: postgres ${at.user ? `${at.user}@` : ''}${at.host}:${at.port}/${database}`,
  }
}

/** Errors that mean the database is not reachable as configured (network or login). */
const UNREACHABLE = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNRESET',
  '28P01', // password authentication failed
  '28000', // no pg_hba.conf entry / invalid authorization
  '3D000', // database does not exist
])

/**
 * A Postgres that cannot be reached or logged into, named with where it was looked for and
 * the settings that say so (`connect ECONNREFUSED 127.0.0.1:5432` named neither Postgres nor
 * DATABASE_URL); undefined for any other error. Never the URL's password.
 */
export function storeUnreachable(config: Readonly<Config>, error: unknown): Error | undefined {
  const code = (error as { code?: unknown } | null)?.code
  if (!config.databaseUrl || typeof code !== 'string' || !UNREACHABLE.has(code)) return undefined
  const where = storeLine(config).msg.replace(/^store: postgres /, '')
  return new Error(
    `cannot reach Postgres at ${where} (databaseUrl: --database-url, DATABASE_URL or the config file): ${(error as Error).message}`,
    { cause: error },
  )
}

/** Where the rate-limit counters live: Redis (shared by every instance) or in-process. */
export function countersLine(config: Readonly<Config>): StartupLine {
  if (!config.rateLimit.enabled) {
    return { fields: { rateLimit: 'off' }, msg: 'rate limits: off (rateLimit.enabled: false)' }
  }
  if (!config.redisUrl) {
    return {
      fields: { rateLimit: 'in-process' },
      msg: 'rate limits: counted in-process (no redisUrl: each instance counts alone)',
    }
  }
  const target = parseRedisUrl(config.redisUrl)
  const tls = config.redisUrl.startsWith('rediss') ? ', TLS' : ''
  if (target.mode !== 'standalone') {
    // Hosts, ports and the master's name only: the URL's passwords never reach a log line.
    const hosts = (target.mode === 'sentinel' ? target.sentinels : target.nodes)
      .map(({ host, port }) => `${host}:${port}`)
      .join(',')
    const what =
      target.mode === 'sentinel'
        ? `sentinel ${hosts} master ${target.name}/${target.db}`
        : `cluster ${hosts}`
    return {
      fields: { rateLimit: `redis-${target.mode}`, hosts },
      msg: `rate limits: redis ${what} (shared by every instance${tls})`,
    }
  }
  const at = location(config.redisUrl, 6379)
  return {
    fields: { rateLimit: 'redis', host: at.host, port: at.port, db: at.path || '0' },
    msg: `rate limits: redis ${at.host}:${at.port}/${at.path || '0'} (shared by every instance${tls})`,
  }
}

/** The gateway's upstream (an outbound target, not a listener), when one is configured. */
export function upstreamLine(config: Readonly<Config>): StartupLine | undefined {
  const gateway = config.gateway
  if (!gateway) return undefined
  // With policyStore the file is not read: the stored policy is in force (reload.ts).
  const policy = gateway.policyStore
    ? 'policy: the stored one (gateway.policyStore; tokengate policy show), any valid token while none is stored'
    : gateway.policyFile
      ? `policy ${gateway.policyFile}`
      : 'no policy file: any valid token'
  // Origin and path only: a URL's user and password never reach a log line.
  const { origin, pathname } = new URL(gateway.upstream)
  const upstream = `${origin}${pathname === '/' ? '' : pathname}`
  return {
    fields: { upstream },
    msg: `gateway upstream: ${upstream} (other /api/v1 requests are proxied there; ${policy})`,
  }
}

/** Host, port, first path segment and user of a URL: never its password or query. */
function location(url: string, defaultPort: number) {
  const parsed = new URL(url)
  return {
    host: parsed.hostname || 'localhost',
    port: Number(parsed.port) || defaultPort,
    path: decodeURIComponent(parsed.pathname.replace(/^\//, '')),
    user: decodeURIComponent(parsed.username),
  }
}
