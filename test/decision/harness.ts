/**
 * Decision API harness: one real tokengate (plain HTTP on 127.0.0.1; the sources or the
 * installed package, see helpers/launch.ts) serving both the
 * gateway (the reference answers: "tokengate directly") and the forward-auth decision
 * listener, in front of the gateway tests' recording upstream; a SQLite store holding the
 * SPEC table's tenant, trusted issuer and PATs; and helpers to run nginx and Caddy with the
 * documented configs from examples/forward-auth/.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { issuePat } from '../../src/core/pat.ts'
import { openStore } from '../../src/stores/open-store.ts'
import type { SpecFixture } from '../adapters/spec-table.ts'
import { PROTECTED_PATH, REQUIRED_PERMISSION } from '../adapters/spec-table.ts'
import { startUpstream, type Upstream } from '../gateway/harness.ts'
import { createTestIssuer, TEST_TENANT } from '../helpers/jwt.ts'
import { type Launched, launchTokengate } from '../helpers/launch.ts'
import { binaryPath, freePort } from '../helpers/services.ts'
import { ingressNginxServer } from './ingress-nginx-shape.ts'

export const EXAMPLES = join(import.meta.dirname, '../../examples/forward-auth')

/** The route policy of the SPEC table: the protected path needs the table's permission. */
export const SPEC_POLICY = `default: authenticated
rules:
  - methods: [GET]
    path: ${PROTECTED_PATH}
    permissions: [${REQUIRED_PERMISSION}]
  - methods: '*'
    path: /api/v1/internal/*
    deny: true
  - methods: '*'
    path: /api/v1/tenants/:tenant/*
    tenantParam: tenant
  - methods: [GET]
    path: /api/v1/projects/*
    permissions: [projects:read]
  - methods: [DELETE]
    path: /api/v1/projects/*
    permissions: [projects:write]
`

/** Identity headers a hostile client adds to every SPEC-table request. */
export const SPOOFED_IDENTITY: [string, string][] = [
  ['X-Auth-Tenant', 'evil-tenant'],
  ['X-Auth-Subject', 'root'],
  ['X-Auth-Token-Id', 'spoofed-id'],
  ['X-Auth-Permissions', 'admin:all'],
  ['X-Auth-Token-Type', 'pat'],
]

export interface Stack {
  readonly upstream: Upstream
  readonly running: Launched
  /** tokengate's own gateway: the reference answer. */
  readonly gatewayUrl: string
  readonly decisionUrl: string
  readonly decisionPort: number
  /** `http://host:port` of the Envoy gRPC ext_authz service (option `grpc`). */
  readonly grpcUrl: string | undefined
  readonly tokens: SpecFixture['tokens']
  /** A PAT of the same tenant holding only `projects:read`. */
  readonly readerPat: string
  /** A JWT of a trusted issuer whose JWKS URL refuses connections: tokengate answers 503. */
  readonly unreachableIssuerJwt: string
  readonly dataDir: string
  close(): Promise<void>
}

export interface StackOptions {
  /** `decision.proxy`: the header family the decision listener believes (default envoy: the request line). */
  readonly proxy?: string
  /** `server.cors.origins`. */
  readonly corsOrigins?: string
  /** Start the Envoy gRPC ext_authz service too (`decision.grpcPort: 0`). */
  readonly grpc?: boolean
  /** `decision.trustedProxies`; default loopback. */
  readonly trustedProxies?: readonly string[]
  readonly pathPrefix?: string
  readonly identityToken?: boolean
  /** Per-token requests per window (default: high enough never to matter). */
  readonly perTokenMax?: number
  /** Failed authentications per address per window (default: high enough never to matter). */
  readonly failedAuthMax?: number
  /** Serve `/metrics` on a port of its own (`running.metricsUrl`). */
  readonly metrics?: boolean
  /** `tracing.enabled` (spans go to whatever provider the test registered). */
  readonly tracing?: boolean
  /** `decision.socket.path`: the decision listener on this Unix socket instead of a port. */
  readonly socket?: string
}

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const upstream = await startUpstream()
  const dataDir = mkdtempSync(join(tmpdir(), 'tokengate-decision-'))
  const issuer = createTestIssuer()
  const foreign = createTestIssuer({ issuer: 'https://untrusted.test' })
  const store = await openStore({ dataDir })
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: TEST_TENANT, name: 'Tenant A' }, now)
  await store.putIssuer(issuer.config, now)
  const down = createTestIssuer({ issuer: 'https://down.test' })
  const closedPort = await freePort()
  await store.putIssuer(
    { ...down.config, keySource: { kind: 'jwks_url', url: `http://127.0.0.1:${closedPort}/jwks` } },
    now,
  )
  const pat = async (permissions: string[], expiresAt = now + 3_600_000) => {
    const issued = issuePat({
      tenantId: TEST_TENANT,
      subject: 'ci-bot',
      name: 'spec',
      permissions,
      expiresAt,
      now: now - 7_200_000,
    })
    await store.insertPat(issued.record)
    return issued
  }
  const readerPat = (await pat(['projects:read'])).token
  const revoked = await pat([REQUIRED_PERMISSION])
  await store.revokePat(revoked.record.id, now - 60_000)
  const tokens: SpecFixture['tokens'] = {
    jwt: await issuer.sign({ permissions: [REQUIRED_PERMISSION] }),
    jwtWithoutPermission: await issuer.sign({ permissions: ['other:read'] }),
    expiredJwt: await issuer.sign({}, { nowMs: now - 3_600_000, expiresInSec: 300 }),
    foreignJwt: await foreign.sign({ permissions: [REQUIRED_PERMISSION] }),
    pat: (await pat([REQUIRED_PERMISSION])).token,
    patWithoutPermission: (await pat([])).token,
    expiredPat: (await pat([REQUIRED_PERMISSION], now - 60_000)).token,
    revokedPat: revoked.token,
    unknownPat: issuePat({
      tenantId: TEST_TENANT,
      subject: 'x',
      name: 'x',
      permissions: [],
      expiresAt: null,
      now,
    }).token,
  }
  await store.close()
  const policyFile = join(dataDir, 'policy.yaml')
  writeFileSync(policyFile, SPEC_POLICY)

  const running = await launchTokengate({
    dataDir,
    server: {
      host: '127.0.0.1',
      port: 0,
      plainHttp: true,
      ...(options.corsOrigins ? { cors: { origins: options.corsOrigins } } : {}),
    },
    log: { level: 'silent' },
    rateLimit: {
      failedAuth: { max: options.failedAuthMax ?? 10_000 },
      perToken: { max: options.perTokenMax ?? 1_000_000 },
    },
    gateway: { upstream: upstream.url, policyFile },
    decision: {
      host: '127.0.0.1',
      port: 0,
      proxy: options.proxy ?? 'envoy',
      ...(options.trustedProxies ? { trustedProxies: options.trustedProxies } : {}),
      ...(options.pathPrefix ? { pathPrefix: options.pathPrefix } : {}),
      ...(options.grpc ? { grpcPort: 0 } : {}),
      ...(options.socket ? { socket: { path: options.socket } } : {}),
    },
    ...(options.identityToken ? { identityToken: { enabled: true } } : {}),
    ...(options.metrics ? { metrics: { enabled: true, host: '127.0.0.1', port: 0 } } : {}),
    ...(options.tracing ? { tracing: { enabled: true } } : {}),
  }).catch(async (error: unknown) => {
    await upstream.close()
    rmSync(dataDir, { recursive: true, force: true })
    throw error
  })
  const decisionUrl = running.decisionUrl as string
  return {
    upstream,
    running,
    gatewayUrl: running.url,
    decisionUrl,
    decisionPort: options.socket ? 0 : Number(new URL(decisionUrl).port),
    grpcUrl: running.decisionGrpcUrl,
    tokens,
    readerPat,
    unreachableIssuerJwt: await down.sign({ permissions: [REQUIRED_PERMISSION] }),
    dataDir,
    async close() {
      await running.close()
      await upstream.close()
      rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

export { freePort }

/** The documented example with its addresses replaced by the test's ports. */
export function exampleConfig(
  file: string,
  ports: { proxy: number; decision: number; upstream: number },
): string {
  return readFileSync(join(EXAMPLES, file), 'utf8')
    .replaceAll('127.0.0.1:8080', `127.0.0.1:${ports.proxy}`)
    .replaceAll('127.0.0.1:8081', `127.0.0.1:${ports.decision}`)
    .replaceAll('127.0.0.1:3000', `127.0.0.1:${ports.upstream}`)
}

export interface ProxyProcess {
  readonly url: string
  /** The process's temporary prefix (nginx: its config and the decision cache's files). */
  readonly dir: string
  /** What the process wrote to stderr so far (for failure messages). */
  log(): string
  stop(): Promise<void>
}

/**
 * nginx in the foreground, one process, everything in a temporary prefix: the example is
 * included inside `http { }` as a user would include it.
 */
export async function startNginx(
  ports: { decision: number; upstream: number },
  options: {
    readonly decisionCache?: boolean
    readonly decisionSocket?: string
    /** examples/forward-auth/nginx-lua.conf (allows kept in a Lua shared dict) instead. */
    readonly lua?: boolean
    /** Rewrites the example's config last (a test's debug location, a deliberately wrong config). */
    readonly edit?: (config: string) => string
  } = {},
): Promise<ProxyProcess> {
  const proxy = await freePort()
  const example = exampleConfig(options.lua ? 'nginx-lua.conf' : 'nginx.conf', { proxy, ...ports })
  const config =
    options.decisionSocket === undefined
      ? example
      : withDecisionSocket(example, ports.decision, options.decisionSocket)
  const cached = options.decisionCache ? withDecisionCache(config, '{{dir}}/cache') : config
  return runNginx(options.edit ? options.edit(cached) : cached, proxy)
}

/**
 * The nginx example asking the decision listener on a Unix socket (decision.socket), as
 * docs/forward-auth.md says: the decision upstream's `server` line names `unix:<path>`.
 */
export function withDecisionSocket(config: string, decisionPort: number, path: string): string {
  const server = `server 127.0.0.1:${decisionPort};`
  if (!config.includes(server)) throw new Error(`nginx.conf: no "${server}" line`)
  return config.replace(server, `server unix:${path};`)
}

/** Debian's libnginx-mod-http-perl, which the example's decision cache needs (perl_set). */
export const NGINX_PERL_MODULE = '/usr/lib/nginx/modules/ngx_http_perl_module.so'

/**
 * Debian's libnginx-mod-http-lua, which examples/forward-auth/nginx-lua.conf needs, and the
 * NDK module it is built against (loaded first).
 */
export const NGINX_LUA_MODULE = '/usr/lib/nginx/modules/ngx_http_lua_module.so'
export const NGINX_NDK_MODULE = '/usr/lib/nginx/modules/ndk_http_module.so'

/** The nginx example with its decision cache turned on (its `#cache ` lines), kept in `dir`. */
export function withDecisionCache(config: string, dir: string): string {
  const enabled = config.replaceAll('#cache ', '').replaceAll('/run/nginx/tokengate-decisions', dir)
  if (enabled === config) throw new Error('nginx.conf has no decision cache lines')
  return enabled
}

/**
 * nginx configured exactly as ingress-nginx generates it for the Ingress in
 * examples/forward-auth/ingress-nginx.yaml (its `auth-url` and `auth-response-headers`
 * annotations), in place of the ingress controller.
 */
export async function startIngressNginx(ports: {
  decision: number
  upstream: number
}): Promise<ProxyProcess> {
  const proxy = await freePort()
  return runNginx(ingressNginxServer({ proxy, ...ports }), proxy)
}

/** Runs nginx with `server` (http-level directives and server blocks) inside `http { }`. */
export async function runNginx(server: string, port: number): Promise<ProxyProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-nginx-'))
  writeFileSync(join(dir, 'tokengate.conf'), server.replaceAll('{{dir}}', dir))
  writeFileSync(
    join(dir, 'nginx.conf'),
    nginxMainConfig(dir, {
      perl: /\bperl_set\b/.test(server),
      lua: /\b\w+_by_lua_block\b/.test(server),
    }),
  )
  const child = spawn(
    binaryPath('nginx') as string,
    ['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', 'stderr'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  )
  return watchProxy(child, [port], dir)
}

/**
 * nginx's main config for a test or bench instance: foreground, one process, every file in
 * `dir`, `tokengate.conf` (in `dir`) included inside `http { }` as a user would include it,
 * then `extraHttp`.
 */
export function nginxMainConfig(
  dir: string,
  options: {
    readonly errorLog?: string
    readonly connections?: number
    readonly extraHttp?: string
    /** Loads Debian's perl module (the decision cache's credential digest). */
    readonly perl?: boolean
    /** Loads Debian's Lua module and its NDK module (examples/forward-auth/nginx-lua.conf). */
    readonly lua?: boolean
  } = {},
): string {
  const modules = [
    ...(options.perl ? [NGINX_PERL_MODULE] : []),
    ...(options.lua ? [NGINX_NDK_MODULE, NGINX_LUA_MODULE] : []),
  ]
  return `${modules.map((path) => `load_module ${path};\n`).join('')}daemon off;
master_process off;
worker_processes 1;
pid ${join(dir, 'nginx.pid')};
error_log stderr ${options.errorLog ?? 'warn'};
events { worker_connections ${options.connections ?? 256}; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  include ${join(dir, 'tokengate.conf')};
${options.extraHttp ?? ''}}
`
}

/** Caddy with the example Caddyfile, admin API off, no automatic HTTPS. */
export async function startCaddy(ports: {
  decision: number
  upstream: number
}): Promise<ProxyProcess> {
  const proxy = await freePort()
  return runCaddy(exampleConfig('Caddyfile', { proxy, ...ports }), [proxy])
}

/** Runs Caddy with `caddyfile`, its admin API off; ready once every port in `ports` accepts. */
export async function runCaddy(caddyfile: string, ports: readonly number[]): Promise<ProxyProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-caddy-'))
  const file = join(dir, 'Caddyfile')
  writeFileSync(file, caddyfile)
  const child = spawn(
    binaryPath('caddy') as string,
    ['run', '--config', file, '--adapter', 'caddyfile'],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir },
    },
  )
  return watchProxy(child, ports, dir)
}

async function watchProxy(
  child: ChildProcess,
  ports: readonly number[],
  dir: string,
): Promise<ProxyProcess> {
  let stderr = ''
  child.stderr?.setEncoding('utf8')
  child.stderr?.on('data', (chunk: string) => {
    stderr += chunk
  })
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
      await exited
      clearTimeout(timer)
    }
    rmSync(dir, { recursive: true, force: true })
  }
  const deadline = Date.now() + 20_000
  for (const port of ports) {
    while (!(await accepts(port))) {
      if (child.exitCode !== null || Date.now() > deadline) {
        await stop()
        throw new Error(`proxy did not start on ${port}: ${stderr}`)
      }
      await sleep(50)
    }
  }
  return { url: `http://127.0.0.1:${ports[0]}`, dir, log: () => stderr, stop }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const connection = createConnection({ host: '127.0.0.1', port })
    connection.once('connect', () => {
      connection.destroy()
      resolve(true)
    })
    connection.once('error', () => resolve(false))
  })
}
