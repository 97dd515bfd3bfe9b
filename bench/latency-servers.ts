/**
 * The servers bench/latency.bench.ts measures, started on first use and kept up for the whole
 * run: every server under test on CPU 0 and the load generator on CPU 1. The proxies' upstream
 * is on CPU 0 too (proxy, tokengate and upstream on one core: what a small node or a sidecar
 * gives, issue #36), or with `split` on CPU 1 beside the load generator (the arrangement of the
 * results recorded before issue #36, where a proxy had CPU 0 to itself).
 */
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { NGINX_PERL_MODULE } from '../test/decision/harness.ts'
import type { Fixtures } from './fixtures.ts'
import { PRODUCTION_NODE_FLAGS } from './load.ts'
import { freePort, type Started, startNode, stop } from './processes.ts'
import { haproxyBinary, startHaproxy } from './servers/haproxy.ts'
import { nginxBinary, type RunningNginx, startNginx } from './servers/nginx.ts'

export const SERVER_CPU = 0
export const LOAD_CPU = 1

export const SERVER_IDS = [
  'fastify-noauth',
  'fastify-naive',
  'fastify-jwt',
  'tokengate',
  'tokengate slow-fsync',
  'library',
  'createTokengate',
  'upstream',
  'gateway',
  'haproxy',
  'nginx',
  'nginx + decision',
  'nginx + decision (cached)',
  'nginx + decision (no keepalive)',
  'nginx + decision (unix)',
  'decision socket',
  'undici proxy',
] as const
export type ServerId = (typeof SERVER_IDS)[number]

export interface RunningServer {
  readonly url: string
  /** The process whose stderr and exit matter (nginx: both listeners share one). */
  readonly child: ChildProcess
}

/** Why a server cannot run here (a missing binary), or undefined. */
export function missingFor(id: ServerId): string | undefined {
  if (id === 'haproxy' && !haproxyBinary()) return 'haproxy is not installed'
  if (id.startsWith('nginx') && !nginxBinary()) return 'nginx is not installed'
  if (id === 'nginx + decision (cached)' && !existsSync(NGINX_PERL_MODULE)) {
    return "nginx's perl module is not installed (apt-get install libnginx-mod-http-perl)"
  }
  return undefined
}

export class LatencyServers {
  readonly #fixtures: Fixtures
  readonly #env: Partial<Record<ServerId, Record<string, string>>>
  readonly #started = new Map<ServerId, Promise<RunningServer>>()
  readonly #cleanups: (() => void)[] = []
  readonly #upstreamCpu: number
  readonly #nodeFlags: Partial<Record<ServerId, readonly string[]>>

  /**
   * `env`: added to the environment of those servers (the slow-disk shim, the stall probe of
   * bench/latency-stalls.ts; Node servers only). `split`: the
   * upstream on the load generator's CPU instead of the servers'.
   */
  constructor(
    fixtures: Fixtures,
    env: Partial<Record<ServerId, Record<string, string>>> = {},
    options: {
      readonly split?: boolean
      /** Node flags added before the script of those servers (A/B of V8 settings). */
      readonly nodeFlags?: Partial<Record<ServerId, readonly string[]>>
    } = {},
  ) {
    this.#fixtures = fixtures
    this.#env = env
    this.#upstreamCpu = options.split ? LOAD_CPU : SERVER_CPU
    this.#nodeFlags = options.nodeFlags ?? {}
  }

  /** The server, started (with what it depends on) if it is not running yet. */
  get(id: ServerId): Promise<RunningServer> {
    let running = this.#started.get(id)
    if (!running) {
      running = this.#start(id)
      this.#started.set(id, running)
    }
    return running
  }

  /** The pids of the servers started so far (nginx: its master). */
  async pids(): Promise<number[]> {
    const running = await Promise.all(
      [...this.#started.values()].map((s) => s.catch(() => undefined)),
    )
    return running.flatMap((server) => (server?.child.pid === undefined ? [] : [server.child.pid]))
  }

  /** The started servers whose process has exited (a crash: their rows would measure nothing). */
  async exited(): Promise<string[]> {
    const gone: string[] = []
    for (const [id, running] of this.#started) {
      const child = (await running.catch(() => undefined))?.child
      if (child && (child.exitCode !== null || child.signalCode !== null)) {
        gone.push(`${id} (${child.signalCode ?? `exit ${child.exitCode}`})`)
      }
    }
    return gone
  }

  /** Stops every started server, the dependents first. */
  async stopAll(): Promise<void> {
    for (const running of [...this.#started.values()].reverse()) {
      const server = await running.catch(() => undefined)
      await stop(server?.child)
    }
    for (const cleanup of this.#cleanups) cleanup()
  }

  async #start(id: ServerId): Promise<RunningServer & { decisionSocket?: string }> {
    const dir = this.#fixtures.dir
    const tokengate = [
      ...PRODUCTION_NODE_FLAGS,
      ...(this.#nodeFlags[id] ?? []),
      'bench/servers/tokengate.ts',
      dir,
    ]
    const peer = (kind: string) => ['bench/servers/peer.ts', kind, 'RS256', dir]
    switch (id) {
      case 'fastify-noauth':
      case 'fastify-naive':
      case 'fastify-jwt':
        return node(SERVER_CPU, peer(id), [], this.#env[id])
      case 'upstream':
        return node(this.#upstreamCpu, peer('upstream'), [], this.#env.upstream)
      case 'undici proxy':
        return node(
          SERVER_CPU,
          ['bench/servers/undici-proxy.ts', (await this.get('upstream')).url],
          [],
          this.#env[id],
        )
      case 'tokengate':
        return node(SERVER_CPU, tokengate, [], this.#env.tokengate)
      case 'tokengate slow-fsync': {
        const env = this.#env[id]
        if (!env) throw new Error('no slow-fsync shim was built')
        return node(SERVER_CPU, tokengate, [], env)
      }
      case 'library':
        return node(SERVER_CPU, ['bench/servers/library.ts', dir])
      case 'createTokengate':
        return node(SERVER_CPU, ['bench/servers/library.ts', dir], ['--create-tokengate'])
      case 'gateway':
        return node(
          SERVER_CPU,
          tokengate,
          [(await this.get('upstream')).url, '--decision'],
          this.#env.gateway,
        )
      case 'haproxy': {
        const haproxy = await startHaproxy(await portOf(this.get('upstream')), SERVER_CPU)
        this.#cleanups.push(haproxy.cleanup)
        return haproxy
      }
      case 'nginx':
        return { child: (await this.#nginx()).child, url: (await this.#nginx()).plain }
      case 'nginx + decision':
        return { child: (await this.#nginx()).child, url: (await this.#nginx()).guarded }
      case 'nginx + decision (cached)': {
        const cached = await this.#nginx('cache')
        return { child: cached.child, url: cached.guarded }
      }
      case 'nginx + decision (no keepalive)': {
        const closing = await this.#nginx('no keepalive')
        return { child: closing.child, url: closing.guarded }
      }
      case 'nginx + decision (unix)': {
        const unix = await this.#nginx('unix')
        return { child: unix.child, url: unix.guarded }
      }
      case 'decision socket': {
        // A second gateway, its decision listener on a Unix socket (decision.socket) instead
        // of a port: the unix row's nginx asks it (as `tokengate-decision-socket` in run.ts).
        const dir = mkdtempSync(join(tmpdir(), 'tg-latency-sock-'))
        this.#cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
        const socket = join(dir, 'decision.sock')
        const server = await node(
          SERVER_CPU,
          tokengate,
          [(await this.get('upstream')).url, `--decision-socket=${socket}`],
          this.#env[id],
        )
        return { ...server, decisionSocket: socket }
      }
    }
  }

  readonly #nginxStarted = new Map<string, Promise<RunningNginx>>()

  /**
   * One nginx process serves both uncached nginx rows: the plain proxy and the auth_request
   * one; the decision cache (examples/forward-auth/nginx.conf `#cache ` lines), the one
   * without keepalive and the one asking the Unix socket each have their own.
   */
  #nginx(
    variant: 'example' | 'cache' | 'no keepalive' | 'unix' = 'example',
  ): Promise<RunningNginx> {
    let started = this.#nginxStarted.get(variant)
    if (!started) {
      started = (async () => {
        const upstream = await portOf(this.get('upstream'))
        const gateway = (await this.get('gateway')) as RunningServer & { decisionPort: number }
        const socket =
          variant === 'unix'
            ? ((await this.get('decision socket')) as RunningServer & { decisionSocket: string })
                .decisionSocket
            : undefined
        const nginx = await startNginx(upstream, gateway.decisionPort, {
          cpu: SERVER_CPU,
          cache: variant === 'cache',
          keepalive: variant !== 'no keepalive',
          ...(socket === undefined ? {} : { decisionSocket: socket }),
        })
        this.#cleanups.push(nginx.cleanup)
        return nginx
      })()
      this.#nginxStarted.set(variant, started)
    }
    return started
  }
}

/** A bench server (`node argv <port> ...more`), with `DECISION <port>` read when it prints one. */
async function node(
  cpu: number,
  argv: string[],
  more: string[] = [],
  env: Record<string, string> = {},
): Promise<RunningServer & { decisionPort?: number }> {
  const port = await freePort()
  const started: Started = await startNode(cpu, [...argv, String(port), ...more], env)
  const decision = /^DECISION (\d+)/m.exec(started.output)?.[1]
  return {
    child: started.child,
    url: `http://127.0.0.1:${port}`,
    ...(decision ? { decisionPort: Number(decision) } : {}),
  }
}

async function portOf(server: Promise<RunningServer>): Promise<number> {
  return Number(new URL((await server).url).port)
}
