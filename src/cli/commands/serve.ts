import type { Config } from '../../config/schema.ts'
import { serveAsProduction } from '../../lib/serving-process.ts'
import { workerCount } from '../../server/workers.ts'
import { flag, optionalString } from '../args.ts'
import type { CommandContext, CommandDef } from '../context.ts'
import { UsageError } from '../errors.ts'
import type { Served, ServeOptions, ServerEntry, TextSink } from '../io.ts'
import { watchNpmShell } from './serve-parent.ts'

/** `HOST:PORT` (`[::1]:8443` for IPv6) into config overrides; port 0-65535. */
export function parseListen(text: string): { host: string; port: number } {
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]\s]+):([0-9]{1,5})$/.exec(text)
  const port = Number(match?.[2])
  if (!match || port > 65535) {
    throw new UsageError(
      `--listen: '${text}' is not HOST:PORT (expected e.g. 127.0.0.1:8443, 0.0.0.0:443 or [::1]:8443)`,
    )
  }
  return { host: (match[1] as string).replace(/^\[(.*)\]$/, '$1'), port }
}

const serve: CommandDef = {
  path: ['serve'],
  summary: 'Start the server (HTTPS; applies migrations first)',
  synopsis: '[--listen HOST:PORT] [--dev] [--http] [--upstream URL [--policy FILE]]',
  description:
    'Runs until SIGTERM, SIGINT or SIGQUIT, then finishes in-flight requests (server.shutdownTimeoutMs),\nflushes and exits 0 (1 if flushing outlasts 5 s more). SIGHUP reloads\nthe gateway and decision policy files and stops nothing. In dev mode a new data directory\ngets a demo tenant, a demo PAT, a local JWT issuer and a self-signed certificate, and\nready-to-paste curl commands are printed.',
  options: {
    listen: {
      type: 'string',
      value: 'HOST:PORT',
      description: 'Address (default 127.0.0.1:8443).',
    },
    dev: { type: 'boolean', description: 'Dev mode (never in production).' },
    http: {
      type: 'boolean',
      description: 'Plain HTTP, only behind a TLS-terminating proxy (server.plainHttp).',
    },
    upstream: {
      type: 'string',
      value: 'URL',
      description: 'Gateway mode: proxy other /api/v1 requests to URL (gateway.upstream).',
    },
    policy: {
      type: 'string',
      value: 'FILE',
      description: 'Gateway route policy, YAML or JSON (gateway.policyFile).',
    },
  },
  examples: [
    'tokengate serve --dev',
    'tokengate serve --config /etc/tokengate.yaml --listen 0.0.0.0:8443',
    'tokengate serve --upstream http://127.0.0.1:3000 --policy gateway-policy.yaml',
  ],
  async run(ctx) {
    const listen = optionalString(ctx.args, 'listen')
    const server: Record<string, unknown> = listen === undefined ? {} : parseListen(listen)
    if (flag(ctx.args, 'http')) server.plainHttp = true
    const gateway: Record<string, unknown> = {}
    const upstream = optionalString(ctx.args, 'upstream')
    const policy = optionalString(ctx.args, 'policy')
    if (upstream !== undefined) gateway.upstream = upstream
    if (policy !== undefined) gateway.policyFile = policy
    const config = ctx.config({
      server,
      ...(Object.keys(gateway).length > 0 ? { gateway } : {}),
      ...(flag(ctx.args, 'dev') ? { dev: true } : {}),
    })
    // With --json, stdout carries only the one JSON document; the log goes to stderr.
    const log = ctx.io.log ?? (ctx.json ? ctx.io.stderr : undefined)
    const options = log ? { logDestination: toDestination(log) } : {}
    const workers = workerCount(config.server.workers)
    const signals = catchStopSignals(ctx.io.env)
    try {
      return await serveUntilStopped(ctx, config, workers, options, signals.stopped)
    } finally {
      signals.dispose()
    }
  },
}

async function serveUntilStopped(
  ctx: CommandContext,
  config: Readonly<Config>,
  workers: number,
  options: ServeOptions,
  signalled: Promise<string>,
): Promise<number> {
  const server = await serverOf(ctx)
  const starting: Promise<Served & { readonly failed?: Promise<string> }> =
    workers > 1
      ? startWorkers(
          server,
          config,
          workers,
          options,
          ctx.json,
          (line) => ctx.out.note(line),
          ctx.io.env.NODE_OPTIONS,
        )
      : server.startTokengate(config, options)
  // A Postgres that cannot be reached is named with its settings (startup.ts).
  const named = starting.catch(async (error: unknown) => {
    const { storeUnreachable } = await import('../../startup.ts')
    throw storeUnreachable(config, error) ?? error
  })
  const running = await Promise.race([named, signalled.then((name) => name)])
  if (typeof running === 'string') {
    // Nothing is served yet, so nothing to drain: a start waiting on a store that does not
    // answer must not outlive the orchestrator's grace period.
    ctx.out.note(`tokengate: ${running} during start-up, exiting`)
    process.exit(0)
  }
  // Node exits on SIGHUP by default. Here it only reloads policy files (each listener
  // with one registers its own reload); the worker pool's primary passes it on itself.
  const noteHangup = () => {
    if (!config.gateway?.policyFile && !config.decision?.policyFile) {
      ctx.out.note('tokengate: SIGHUP: no gateway or decision policy file to reload')
    }
  }
  if (workers <= 1) process.on('SIGHUP', noteHangup)
  // One process serving: it gives memory back when idle (a worker pool's workers do it each)
  // and keeps its old space near what is live under load (the bench server calls this too).
  const tuned = serveAsProduction({
    execArgv: process.execArgv,
    nodeOptions: ctx.io.env.NODE_OPTIONS,
    workers,
  })
  let exitCode = 0
  try {
    const seed = running.devSeed
    // Dev mode only: the banner mints a JWT with jose, which a production start never loads.
    const banner = config.dev && seed ? await import('../dev-banner.ts') : undefined
    const commands =
      banner && seed ? await banner.devCommands(config, seed, running.url, ctx.now()) : undefined
    if (ctx.json) {
      ctx.out.json({
        url: running.url,
        ...(running.metricsUrl ? { metricsUrl: running.metricsUrl } : {}),
        ...(running.adminUrl ? { adminUrl: running.adminUrl } : {}),
        ...(running.decisionUrl ? { decisionUrl: running.decisionUrl } : {}),
        ...(running.decisionGrpcUrl ? { decisionGrpcUrl: running.decisionGrpcUrl } : {}),
        dev: config.dev,
        store: config.databaseUrl ? 'postgres' : 'sqlite',
        ...(commands && seed
          ? { devSeed: { tenantId: seed.tenantId, demoPat: seed.demoPat ?? null, commands } }
          : {}),
      })
    } else {
      // Text for a person on stderr: stdout carries the JSON log lines a log shipper reads.
      const shown = workers > 1 ? ` (${workers} workers)` : ''
      ctx.out.note(`tokengate is listening on ${running.url}${shown}`)
      if (running.adminUrl) ctx.out.note(`  admin console: ${running.adminUrl}/admin/`)
      if (running.decisionUrl) ctx.out.note(`  decision API:  ${running.decisionUrl}`)
      if (running.decisionGrpcUrl) ctx.out.note(`  decision gRPC: ${running.decisionGrpcUrl}`)
      if (running.metricsUrl) ctx.out.note(`  metrics:       ${running.metricsUrl}`)
      if (banner && commands) ctx.out.note(`\n${banner.formatDevBanner(commands, config)}`)
      ctx.out.note('Press Ctrl+C to stop.')
    }
    const stopped = new AbortController()
    const reason = await Promise.race([
      signalled,
      waitForAbort(ctx.io.signal, stopped.signal),
      running.failed ? running.failed.then((why) => `error: ${why}`) : new Promise<never>(() => {}),
    ])
    stopped.abort()
    if (reason.startsWith('error: ')) exitCode = 1
    if (reason.startsWith('SIG')) exitWithin(config.server.shutdownTimeoutMs, ctx)
    ctx.out.note(`tokengate: ${reason}, shutting down`)
  } finally {
    process.off('SIGHUP', noteHangup)
    tuned.stop()
    await closeForcibly(running.close)
  }
  return exitCode
}

/**
 * `server.workers > 1`: migrations, dev seeding and the dev certificate once, here, then the
 * workers (src/server/workers.ts) each run a full instance on the shared listener.
 */
async function startWorkers(
  server: ServerEntry,
  config: Readonly<Config>,
  count: number,
  options: ServeOptions,
  json: boolean,
  note: (line: string) => void,
  nodeOptions: string | undefined,
) {
  const devSeed = await server.prepareTokengate(config, options)
  const { configForWorkers, startWorkerPool } = await import('../../server/workers.ts')
  const pool = await startWorkerPool({
    config: configForWorkers(config, count),
    count,
    note,
    logToStderr: json,
    nodeOptions,
  })
  return {
    url: pool.url,
    metricsUrl: pool.metricsUrl,
    adminUrl: pool.adminUrl,
    decisionUrl: pool.decisionUrl,
    decisionGrpcUrl: undefined,
    devSeed,
    failed: pool.failed,
    close: pool.close,
  }
}

function toDestination(sink: TextSink) {
  return { write: (line: string) => void sink.write(line) }
}

/** Stop signals: SIGTERM (orchestrators, `podman stop`), SIGINT (Ctrl+C), SIGQUIT (nginx's). */
const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGQUIT'] as const

/**
 * Catches the stop signals from the moment `serve` starts, not only once it listens: as PID 1
 * (a container's entry point) the kernel drops a signal that has no handler, so a SIGTERM during
 * start-up was lost and the orchestrator had to SIGKILL. They stay caught while the server
 * drains: a second SIGTERM never cuts a drain short (a second Ctrl+C does: `closeForcibly`).
 * `stopped` resolves with the first signal's name.
 */
function catchStopSignals(env: Readonly<Record<string, string | undefined>>): {
  readonly stopped: Promise<string>
  dispose(): void
} {
  let resolve: (name: string) => void = () => {}
  const stopped = new Promise<string>((r) => {
    resolve = r
  })
  const handlers = STOP_SIGNALS.map((name) => [name, () => resolve(name)] as const)
  for (const [name, handler] of handlers) process.on(name, handler)
  const unwatch = watchNpmShell(env, () => resolve(NPM_SHELL_EXITED))
  return {
    stopped,
    dispose: () => {
      for (const [name, handler] of handlers) process.off(name, handler)
      unwatch()
    },
  }
}

/** The stop reason when npm's script shell, our parent, exited (serve-parent.ts). */
const NPM_SHELL_EXITED = "npm's script shell exited (npm was stopped)"

/** What the write-behind gets to flush after in-flight requests had their time, in ms. */
const FLUSH_GRACE_MS = 5_000

/**
 * A signalled shutdown ends within `server.shutdownTimeoutMs` + 5 s whatever happens: in-flight
 * requests get the timeout, the flushes the rest. A store that does not answer by then loses
 * nothing by the exit (audit events and usage counts are in the spool and journal, replayed
 * by the next start); the exit code is then 1.
 */
function exitWithin(shutdownTimeoutMs: number, ctx: CommandContext): void {
  const timer = setTimeout(() => {
    ctx.out.note(
      `tokengate: shutdown still flushing after ${shutdownTimeoutMs + FLUSH_GRACE_MS} ms (server.shutdownTimeoutMs + 5 s); exiting, the spool and journal keep the rest`,
    )
    process.exit(1)
  }, shutdownTimeoutMs + FLUSH_GRACE_MS)
  timer.unref()
}

/** Resolves when `signal` aborts; `done` only removes the listener (the wait lost a race). */
function waitForAbort(signal: AbortSignal | undefined, done: AbortSignal): Promise<string> {
  return new Promise((resolve) => {
    const finish = (reason: string) => {
      signal?.removeEventListener('abort', onAbort)
      resolve(reason)
    }
    done.addEventListener('abort', () => finish(''), { once: true })
    const onAbort = () => finish('stop requested')
    if (signal?.aborted) onAbort()
    else signal?.addEventListener('abort', onAbort, { once: true })
  })
}

/** Graceful close; a second Ctrl+C while it runs exits at once (130). */
async function closeForcibly(close: () => Promise<void>): Promise<void> {
  const force = () => process.exit(130)
  process.once('SIGINT', force)
  try {
    await close()
  } finally {
    process.off('SIGINT', force)
  }
}

/** `serve`. */
export const serveCommands: readonly CommandDef[] = [serve]

/** The composition root the process entry handed in (src/entry.ts); never imported here. */
async function serverOf(ctx: CommandContext): Promise<ServerEntry> {
  const load = ctx.io.server
  if (!load)
    throw new Error('serve: no server was handed to the CLI (start it through bin/tokengate.js)')
  return load()
}
