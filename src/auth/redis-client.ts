import type { Cluster, Redis, RedisOptions } from 'ioredis'

/**
 * Where Redis is, from one URL, so that `REDIS_URL` alone describes any deployment:
 *
 * - `redis://[[user]:password@]host:port[/db]`, `rediss://…` (TLS): one server;
 * - `redis-sentinel://[[user]:password@]host:port[,host:port…]/<master name>[/db]`
 *   (`rediss-sentinel://` for TLS to the servers and the sentinels): the sentinels are asked
 *   where the master of `<master name>` is, and again after a failover. The credentials are
 *   the servers'; sentinels that require their own give `?sentinelPassword=…`;
 * - `redis-cluster://[[user]:password@]host:port[,host:port…]` (`rediss-cluster://`): seed
 *   nodes of a Redis Cluster; the client learns the rest and follows slot moves and failovers.
 *
 * Parsed by hand: WHATWG URLs hold one host, and the comma-separated host lists are the
 * de-facto form (Lettuce, redis-py) users already write.
 */
export type RedisTarget =
  | { readonly mode: 'standalone'; readonly url: string }
  | {
      readonly mode: 'sentinel'
      readonly sentinels: readonly HostPort[]
      readonly name: string
      readonly db: number
      readonly tls: boolean
      readonly username?: string | undefined
      readonly password?: string | undefined
      readonly sentinelPassword?: string | undefined
    }
  | {
      readonly mode: 'cluster'
      readonly nodes: readonly HostPort[]
      readonly tls: boolean
      readonly username?: string | undefined
      readonly password?: string | undefined
    }

interface HostPort {
  readonly host: string
  readonly port: number
}

/** The schemes `redisUrl` accepts (config/schema.ts matches the same list). */
export const REDIS_URL_PATTERN = '^rediss?(-sentinel|-cluster)?://'

/** Thrown for a URL that cannot be used; the message never repeats the URL (it has passwords). */
export class RedisUrlError extends Error {
  override readonly name = 'RedisUrlError'
}

export function parseRedisUrl(url: string): RedisTarget {
  const match =
    /^(rediss?)(-sentinel|-cluster)?:\/\/(?:([^@/]*)@)?([^/?#]+)(\/[^?#]*)?(\?[^#]*)?$/.exec(url)
  if (!match) {
    throw new RedisUrlError(
      'redisUrl: expected redis://, rediss://, redis-sentinel://HOST:PORT[,HOST:PORT]/MASTER or redis-cluster://HOST:PORT[,HOST:PORT]',
    )
  }
  const [, scheme, kind, userinfo, hostList = '', path = '', query = ''] = match
  if (!kind) return { mode: 'standalone', url }
  const tls = scheme === 'rediss'
  const [user, password] = (userinfo ?? '').split(/:(.*)/s, 2).map((part) => decode(part))
  const hosts = hostList.split(',').map(hostPort)
  const params = new URLSearchParams(query)
  const credentials = {
    ...(user ? { username: user } : {}),
    ...(password ? { password } : {}),
  }
  if (kind === '-cluster') {
    if (path !== '' && path !== '/') {
      throw new RedisUrlError(
        'redisUrl: a Redis Cluster has no database number or name in the path',
      )
    }
    return { mode: 'cluster', nodes: hosts, tls, ...credentials }
  }
  const [name = '', db = '0'] = path.split('/').slice(1).map(decode)
  if (name === '') throw new RedisUrlError('redisUrl: redis-sentinel:// needs /MASTER_NAME')
  if (!/^\d{1,2}$/.test(db)) throw new RedisUrlError('redisUrl: the database must be a number')
  const sentinelPassword = params.get('sentinelPassword') ?? undefined
  return {
    mode: 'sentinel',
    sentinels: hosts,
    name,
    db: Number(db),
    tls,
    ...credentials,
    ...(sentinelPassword ? { sentinelPassword } : {}),
  }
}

function hostPort(text: string): HostPort {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+):(\d{1,5})$/.exec(text)
  const port = Number(match?.[2])
  if (!match || port < 1 || port > 65535) {
    throw new RedisUrlError('redisUrl: every host needs a port (HOST:PORT)')
  }
  return { host: (match[1] as string).replace(/^\[(.*)\]$/, '$1'), port }
}

function decode(text: string): string {
  try {
    return decodeURIComponent(text)
  } catch {
    throw new RedisUrlError('redisUrl: bad percent-encoding')
  }
}

/** Redis or Cluster: the commands the counters use exist on both. */
export type RedisClient = Redis | Cluster

export interface ConnectOptions {
  /** A command slower than this fails (the caller counts in-process instead). */
  readonly timeoutMs: number
  readonly log: { warn(obj: object, msg: string): void }
}

/**
 * A client that fails fast: no offline queue, no retries of a command, a command timeout,
 * so an outage or a failover costs a request at most `timeoutMs` before it is counted
 * in-process. It reconnects on its own with backoff and, behind Sentinel or Cluster, finds
 * the new master after a failover. Start-up does not wait past one connect attempt.
 */
export async function connectRedis(url: string, options: ConnectOptions): Promise<RedisClient> {
  const target = parseRedisUrl(url)
  // Loaded on demand: a server without `redisUrl` never loads the Redis client.
  const { Redis, Cluster } = await import('ioredis')
  const common: RedisOptions = {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: options.timeoutMs,
    connectTimeout: Math.max(1000, options.timeoutMs * 4),
    enableAutoPipelining: true,
    retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
    // A demoted master answers writes with READONLY: reconnect, which asks the sentinels
    // (or the cluster) where the master is now.
    reconnectOnError: (error) => (error.message.startsWith('READONLY') ? 2 : false),
  }
  let client: RedisClient
  if (target.mode === 'standalone') client = new Redis(target.url, common)
  else if (target.mode === 'sentinel') {
    client = new Redis({
      ...common,
      sentinels: [...target.sentinels],
      name: target.name,
      db: target.db,
      username: target.username,
      password: target.password,
      sentinelPassword: target.sentinelPassword,
      ...(target.tls ? { tls: {}, sentinelTLS: {}, enableTLSForSentinelMode: true } : {}),
      sentinelRetryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
      // Not `failoverDetector`: with it (ioredis 6.0.0) the client sometimes never came back
      // after a master was killed (4 runs in 6 of test/scale/redis-failover.test.ts); asking
      // the sentinels on every reconnect found the new master ~0.4 s after the promotion.
    })
  } else {
    client = new Cluster([...target.nodes], {
      lazyConnect: true,
      enableOfflineQueue: false,
      enableAutoPipelining: true,
      scaleReads: 'master',
      // A failover's MOVED/TRYAGAIN/CLUSTERDOWN are retried briefly inside the command
      // timeout; anything longer is counted in-process by the caller.
      retryDelayOnFailover: 50,
      retryDelayOnClusterDown: 50,
      retryDelayOnTryAgain: 50,
      maxRedirections: 4,
      // A killed master's slots are only learnt anew by a refresh: once a second bounds
      // how long its keys are counted in-process after the replica took over.
      slotsRefreshInterval: 1000,
      clusterRetryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
      redisOptions: {
        ...common,
        username: target.username,
        password: target.password,
        ...(target.tls ? { tls: {} } : {}),
      },
    })
  }
  // Connection errors are reported through the counters' health (one warning per outage);
  // without a listener ioredis would print each reconnect failure itself.
  client.on('error', () => {})
  try {
    await client.connect()
  } catch (error) {
    options.log.warn({ err: error }, 'Redis not reachable at start-up; retrying')
  }
  return client
}
