/**
 * `server.workers`: N processes serving one listener, each a full tokengate instance (own
 * store connection, caches, change detection, audit writer), supervised by a primary that
 * serves nothing itself but `/metrics` for all of them.
 *
 * Why node:cluster and not `reusePort`: with node:cluster the primary owns the socket and
 * hands connections round-robin to the workers, so one busy worker does not collect an
 * unfair share, and `--listen 127.0.0.1:0` gives every worker the same port. `reusePort`
 * (Node 23.1+, Linux) spreads by the kernel's 4-tuple hash, needs every worker to bind the
 * same explicit port, and would leave the primary no IPC channel to aggregate metrics over.
 */
import cluster, { type Worker } from 'node:cluster'
import type http from 'node:http'
import type { AddressInfo } from 'node:net'
import { availableParallelism } from 'node:os'
import { extname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ConfigError } from '../config/load.ts'
import type { Config } from '../config/schema.ts'
import { heapGrowthFlag, type StartedWith } from '../lib/heap-growth.ts'
import { PRODUCTION_NODE_FLAGS } from '../lib/serving-process.ts'
import { listenForMetrics } from './metrics-http.ts'

/** Where a worker's listeners are (`url`: the API listener every worker shares). */
interface InstanceUrls {
  readonly url: string
  readonly adminUrl?: string | undefined
  readonly decisionUrl?: string | undefined
}

/**
 * What a worker runs: one full instance on the given config. `started`: the worker's Node
 * flags and the NODE_OPTIONS it inherited from the primary (what `serveAsProduction` reads).
 */
export type StartInstance = (
  config: Readonly<Config>,
  logToStderr: boolean,
  started: StartedWith,
) => Promise<InstanceUrls & { close(): Promise<void> }>

/** Messages between the primary and a worker (the IPC channel node:cluster opens). */
type ToWorker =
  | {
      type: 'tokengate:start'
      config: Readonly<Config>
      logToStderr: boolean
      nodeOptions: string | undefined
    }
  | { type: 'tokengate:stop' }
type FromWorker =
  | ({ type: 'tokengate:ready' } & InstanceUrls)
  | { type: 'tokengate:failed'; message: string }

/** `auto` is one worker per CPU the process may run on. */
export function workerCount(
  setting: number | 'auto',
  cpus: number = availableParallelism(),
): number {
  return setting === 'auto' ? Math.max(1, cpus) : setting
}

/**
 * The config each worker runs. Without Redis every worker counts in its own memory, so each
 * enforces ceil(max / N) of every rate-limit policy. Why not counters in the primary over
 * IPC: one round trip per request through the primary would make it the bottleneck that the
 * workers exist to remove. The error, per client and window: at least ceil(max / N) requests
 * pass (all on one keep-alive connection, hence one worker) and at most N × ceil(max / N)
 * (< max + N, spread over every worker); never more. With `redisUrl` the counters are shared
 * and exact.
 */
export function configForWorkers(config: Readonly<Config>, count: number): Readonly<Config> {
  if (count > 1) refuseSharedPortZero(config)
  if (config.redisUrl || count <= 1) return config
  const copy = structuredClone(config) as Config
  for (const policy of [
    copy.rateLimit.perToken,
    copy.rateLimit.perTenant,
    copy.rateLimit.failedAuth,
  ]) {
    if (policy.max > 0) policy.max = Math.ceil(policy.max / count)
  }
  return copy
}

/**
 * node:cluster keys a worker's listen by address and port, so every `port: 0` listener of
 * one address would get the same socket: admin and decision requests would reach the API.
 */
function refuseSharedPortZero(config: Readonly<Config>): void {
  const listeners: [string, string, number][] = [
    ['server.port', config.server.host, config.server.port],
  ]
  if (config.admin.enabled) listeners.push(['admin.port', config.admin.host, config.admin.port])
  if (config.decision) {
    listeners.push(['decision.port', config.decision.host, config.decision.port])
  }
  const problems: string[] = []
  for (const [i, [name, host, port]] of listeners.entries()) {
    if (port !== 0) continue
    const other = listeners.slice(0, i).find(([, h, p]) => p === 0 && h === host)
    if (other) {
      problems.push(
        `${other[0]} and ${name} are both 0 on ${host}: with server.workers > 1 the workers' listeners of one address share a socket per port, so give all but one a port of its own`,
      )
    }
  }
  if (problems.length > 0) throw new ConfigError(problems)
}

export interface RestartPolicy {
  /** Delay before the first replacement; doubles per crash inside `windowMs`. */
  readonly initialDelayMs: number
  readonly maxDelayMs: number
  /** More crashes than this inside `windowMs` stop the primary (a crash loop). */
  readonly maxCrashes: number
  readonly windowMs: number
}

const DEFAULT_RESTART: RestartPolicy = {
  initialDelayMs: 100,
  maxDelayMs: 5000,
  maxCrashes: 5,
  windowMs: 60_000,
}

/** serve-worker.ts beside the sources, serve-worker.js in the package (dist/). */
const SERVE_WORKER_ENTRY = fileURLToPath(
  new URL(`../serve-worker${extname(import.meta.url)}`, import.meta.url),
)

export interface WorkerPoolOptions {
  /** The config every worker runs (see `configForWorkers`). */
  readonly config: Readonly<Config>
  readonly count: number
  /** Module a worker process runs; it calls `runWorker`. Default: tokengate's own worker. */
  readonly entry?: string
  /** Operator messages (a worker replaced, the crash loop). */
  readonly note: (line: string) => void
  /** Workers log to stderr instead of stdout (`serve --json` keeps stdout for its document). */
  readonly logToStderr?: boolean
  readonly restart?: RestartPolicy
  /** The primary's NODE_OPTIONS (the workers inherit it): a heap flag chosen there is kept. */
  readonly nodeOptions?: string | undefined
}

export interface WorkerPool {
  /** The shared listener, e.g. `https://127.0.0.1:8443`. */
  readonly url: string
  /** The admin listener (one worker serves it), when enabled. */
  readonly adminUrl: string | undefined
  /** The decision listener (shared like the API's), when configured. */
  readonly decisionUrl: string | undefined
  /** `http://host:port/metrics` of the primary's aggregating listener, when enabled. */
  readonly metricsUrl: string | undefined
  /** Process ids of the workers running now. */
  pids(): number[]
  /** Resolves with the reason when the pool gives up (a crash loop); then call close(). */
  readonly failed: Promise<string>
  /** Graceful: every worker drains and flushes, then exits; the metrics listener closes. */
  close(): Promise<void>
}

/**
 * Forks `count` workers, waits until every one listens, and replaces a worker that exits
 * (backoff doubling from `initialDelayMs`). Rejects if a worker fails to start.
 */
export async function startWorkerPool(options: WorkerPoolOptions): Promise<WorkerPool> {
  const restart = options.restart ?? DEFAULT_RESTART
  const { config } = options
  cluster.setupPrimary({
    exec: options.entry ?? SERVE_WORKER_ENTRY,
    args: [],
    execArgv: servedWorkerFlags({ execArgv: process.execArgv, nodeOptions: options.nodeOptions }),
    serialization: 'advanced',
  })
  const workers = new Set<Worker>()
  const crashes: number[] = []
  let closing = false
  let restartTimer: NodeJS.Timeout | undefined
  let giveUp: (reason: string) => void = () => {}
  const failed = new Promise<string>((resolve) => {
    giveUp = resolve
  })

  // Console sessions live in the memory of the process that signed the operator in, so one
  // worker serves the admin listener: cluster hands every admin connection to the only
  // worker listening on that port. Its replacement takes the listener over.
  let adminWorker: Worker | undefined
  const withoutAdmin: Readonly<Config> = { ...config, admin: { ...config.admin, enabled: false } }

  const fork = (): Promise<InstanceUrls> =>
    new Promise((resolve, reject) => {
      const worker = cluster.fork()
      workers.add(worker)
      const servesAdmin = config.admin.enabled && adminWorker === undefined
      if (servesAdmin) adminWorker = worker
      let ready = false
      worker.on('online', () =>
        send(worker, {
          type: 'tokengate:start',
          config: servesAdmin ? config : withoutAdmin,
          logToStderr: options.logToStderr === true,
          nodeOptions: options.nodeOptions,
        }),
      )
      worker.on('message', (message: FromWorker) => {
        if (message?.type === 'tokengate:ready') {
          ready = true
          resolve(message)
        } else if (message?.type === 'tokengate:failed') {
          reject(new Error(message.message))
        }
      })
      worker.on('exit', (code, signal) => {
        workers.delete(worker)
        if (adminWorker === worker) adminWorker = undefined
        if (!ready) reject(new Error(`worker ${worker.process.pid} exited before listening`))
        if (!closing) onCrash(worker.process.pid, code, signal)
      })
    })

  const onCrash = (pid: number | undefined, code: number | null, signal: string | null) => {
    const now = Date.now()
    crashes.push(now)
    while (crashes.length > 0 && (crashes[0] as number) < now - restart.windowMs) crashes.shift()
    const how = signal ? `signal ${signal}` : `exit code ${code}`
    if (crashes.length > restart.maxCrashes) {
      giveUp(
        `workers exited ${crashes.length} times within ${restart.windowMs / 1000} s (last: pid ${pid}, ${how}); stopping`,
      )
      return
    }
    const delay = Math.min(restart.maxDelayMs, restart.initialDelayMs * 2 ** (crashes.length - 1))
    options.note(`tokengate: worker ${pid} exited (${how}); starting a replacement in ${delay} ms`)
    restartTimer = setTimeout(() => {
      restartTimer = undefined
      if (closing) return
      // A replacement that fails to start exits, and its exit counts as the next crash.
      fork().catch(() => {})
    }, delay)
  }

  // SIGHUP reloads the gateway and decision policy in each worker (gateway/policy-reload.ts);
  // the primary only passes it on, instead of dying of it (Node's default).
  const onHangup = () => {
    for (const worker of workers) if (!worker.isDead()) worker.process.kill('SIGHUP')
  }
  process.on('SIGHUP', onHangup)

  let metricsServer: http.Server | undefined
  const close = async (): Promise<void> => {
    closing = true
    process.off('SIGHUP', onHangup)
    clearTimeout(restartTimer)
    const exits = [...workers].map(
      (worker) =>
        new Promise<void>((resolve) => {
          if (worker.isDead()) return resolve()
          worker.once('exit', () => resolve())
          const kill = setTimeout(
            () => worker.kill('SIGKILL'),
            config.server.shutdownTimeoutMs + 5000,
          )
          kill.unref()
          send(worker, { type: 'tokengate:stop' })
        }),
    )
    await Promise.all(exits)
    if (metricsServer) await closeServer(metricsServer)
  }

  let urls: InstanceUrls[]
  try {
    urls = await Promise.all(Array.from({ length: options.count }, fork))
    if (config.metrics.enabled) {
      metricsServer = await listenForClusterMetrics(config.metrics.host, config.metrics.port)
    }
  } catch (error) {
    await close()
    throw error
  }
  const address = metricsServer?.address() as AddressInfo | undefined
  const metricsUrl = address
    ? `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}/metrics`
    : undefined
  let closed: Promise<void> | undefined
  return {
    url: (urls[0] as InstanceUrls).url,
    adminUrl: urls.find((u) => u.adminUrl)?.adminUrl,
    decisionUrl: urls[0]?.decisionUrl,
    metricsUrl,
    pids: () => [...workers].flatMap((w) => (w.process.pid === undefined ? [] : [w.process.pid])),
    failed,
    close: () => {
      closed ??= close()
      return closed
    },
  }
}

/**
 * The workers get the production Node flags (docs/scale-out.md "Memory per instance") even
 * when the primary was started without them, each unless the command line chose it, and the
 * one-process serve's bound on old-space growth (lib/heap-growth.ts), unless one was chosen.
 */
export function servedWorkerFlags(started: StartedWith): string[] {
  const name = (flag: string) => flag.split('=')[0]?.replaceAll('_', '-')
  const chosen = new Set(started.execArgv.map(name))
  const flags = [
    ...started.execArgv,
    ...PRODUCTION_NODE_FLAGS.filter((flag) => !chosen.has(name(flag))),
  ]
  const growth = heapGrowthFlag(started)
  return growth === undefined ? flags : [...flags, growth]
}

function send(worker: Worker, message: ToWorker): void {
  if (worker.isConnected()) worker.send(message)
}

/** `/metrics` in the primary: every worker's registry, summed by prom-client's aggregator. */
async function listenForClusterMetrics(host: string, port: number): Promise<http.Server> {
  const { AggregatorRegistry } = await import('prom-client')
  const aggregator = new AggregatorRegistry()
  return listenForMetrics(
    { contentType: aggregator.contentType, collect: () => aggregator.clusterMetrics() },
    host,
    port,
  )
}

function closeServer(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  })
}

/**
 * The worker side: waits for the primary's config, starts one instance and reports its URL.
 * Stops gracefully (drain, flush last-used times and audit) on the primary's request,
 * SIGTERM, SIGINT (Ctrl+C reaches the whole process group) or when the primary is gone.
 */
export function runWorker(start: StartInstance): void {
  let running: Promise<{ close(): Promise<void> } | undefined> | undefined
  let stopping = false
  const stop = () => {
    if (stopping) return
    stopping = true
    void (running ?? Promise.resolve(undefined))
      .then((instance) => instance?.close())
      .then(
        () => process.exit(0),
        () => process.exit(1),
      )
  }
  process.on('message', (message: ToWorker) => {
    if (message?.type === 'tokengate:start' && !running && !stopping) {
      running = start(message.config, message.logToStderr, {
        execArgv: process.execArgv,
        nodeOptions: message.nodeOptions,
      }).then(
        (instance) => {
          process.send?.({
            type: 'tokengate:ready',
            url: instance.url,
            adminUrl: instance.adminUrl,
            decisionUrl: instance.decisionUrl,
          } satisfies FromWorker)
          return instance
        },
        (error: unknown) => {
          const text = error instanceof Error ? error.message : String(error)
          process.send?.({ type: 'tokengate:failed', message: text } satisfies FromWorker, () =>
            process.exit(1),
          )
          return undefined
        },
      )
    } else if (message?.type === 'tokengate:stop') {
      stop()
    }
  })
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  process.on('disconnect', stop)
  // The primary passes SIGHUP on for policy reloads; a worker without a policy ignores it.
  process.on('SIGHUP', () => {})
}
