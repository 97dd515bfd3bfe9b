/**
 * One nginx process (single worker, no master, loopback only, files in a temp dir) with two
 * listeners in front of the same upstream: `plain`, a bare `proxy_pass` (no auth), and
 * `guarded`, the documented forward-auth config (examples/forward-auth/nginx.conf: every
 * request asks tokengate's decision listener through `auth_request`), with the documented
 * decision cache turned on when `cache` is set (docs/forward-auth.md), its files on tmpfs as
 * the example's /run path is; or, with `lua`, examples/forward-auth/nginx-lua.conf (allows kept
 * in a Lua shared dict, Debian's Lua module).
 */
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  exampleConfig,
  nginxMainConfig,
  withDecisionCache,
  withDecisionSocket,
} from '../../test/decision/harness.ts'
import { freePort, startListening } from '../processes.ts'
import { IDENTITY, RATE_LIMIT } from './undici-proxy.ts'

export interface RunningNginx {
  readonly child: ChildProcess
  readonly plain: string
  readonly guarded: string
  /** Removes the temp dir (after the process is stopped). */
  cleanup(): void
}

/** The nginx binary, or undefined when nginx is not installed. */
export function nginxBinary(): string | undefined {
  return ['/usr/sbin/nginx', '/usr/bin/nginx'].find((path) => existsSync(path))
}

/**
 * Starts nginx (on `cpu`, when given) proxying to the upstream and asking the decision port.
 * `keepalive: false` takes the example's `keepalive` out of the decision upstream: one TCP
 * connection per decision, as a config without it has (what the hop costs then, issue #36).
 * `decisionSocket` names a Unix socket path the decision upstream uses instead of the port.
 */
export async function startNginx(
  upstreamPort: number,
  decisionPort: number,
  options: {
    readonly cpu?: number | string
    readonly cache?: boolean
    /** examples/forward-auth/nginx-lua.conf instead of nginx.conf (not with `cache`). */
    readonly lua?: boolean
    readonly keepalive?: boolean
    readonly decisionSocket?: string
    /** Rewrites the example's config last (hop-cpu.ts's what-ifs, hop-rows.ts's floor row). */
    readonly edit?: (config: string) => string
  } = {},
): Promise<RunningNginx> {
  const { cpu } = options
  if (options.lua && options.cache) throw new Error('nginx: lua and cache are two examples')
  const binary = nginxBinary() ?? 'nginx'
  const [plain, guarded] = [await freePort(), await freePort()]
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-bench-nginx-'))
  let example = exampleConfig(options.lua ? 'nginx-lua.conf' : 'nginx.conf', {
    proxy: guarded,
    decision: decisionPort,
    upstream: upstreamPort,
  })
  if (options.keepalive === false) {
    const decisionUpstream = /upstream tokengate_decision \{[^}]*\}/
    const without = example.replace(decisionUpstream, (block) =>
      block.replace(/^\s*keepalive(_timeout)? [^;]*;$/gm, ''),
    )
    if (without === example) throw new Error('nginx.conf: no keepalive in tokengate_decision')
    example = without
  }
  if (options.decisionSocket !== undefined) {
    example = withDecisionSocket(example, decisionPort, options.decisionSocket)
  }
  // The example keeps its cache under /run, a tmpfs on a systemd host: so does the bench.
  const cacheDir = options.cache ? cacheParent() : undefined
  const config = cacheDir ? withDecisionCache(example, join(cacheDir, 'cache')) : example
  writeFileSync(join(dir, 'tokengate.conf'), options.edit ? options.edit(config) : config)
  const plainServer = `  server {
    listen 127.0.0.1:${plain};
    location / {
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://app;
    }
  }
`
  writeFileSync(
    join(dir, 'nginx.conf'),
    nginxMainConfig(dir, {
      errorLog: 'error',
      connections: 1024,
      extraHttp: plainServer,
      perl: options.cache === true,
      lua: options.lua === true,
    }),
  )
  try {
    const child = await startListening(
      cpu,
      binary,
      ['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', 'stderr'],
      [plain, guarded],
    )
    return {
      child,
      plain: `http://127.0.0.1:${plain}`,
      guarded: `http://127.0.0.1:${guarded}`,
      cleanup: () => {
        for (const path of [dir, cacheDir]) if (path) rmSync(path, { recursive: true, force: true })
      },
    }
  } catch (error) {
    for (const path of [dir, cacheDir]) if (path) rmSync(path, { recursive: true, force: true })
    throw error
  }
}

/** `config` with `pattern` replaced; throws when the example no longer has it (a silent no-op edit). */
export function editConfig(config: string, pattern: RegExp, replacement: string): string {
  const edited = config.replace(pattern, replacement)
  if (edited === config) throw new Error(`nginx.conf: ${pattern} not found`)
  return edited
}

/**
 * The floor of any `auth_request`: the subrequest answered by nginx itself (`return 200`), no
 * decision listener, no cache. No decision cache inside nginx can make an allow cheaper.
 */
export function answerSubrequestInNginx(config: string): string {
  return editConfig(
    config,
    /location = \/_tokengate \{[^}]*\}/,
    'location = /_tokengate { internal; return 200; }',
  )
}

/**
 * The subrequest answered by nginx with the allow's headers still sent: the identity, request
 * id and RateLimit pair as constants (what the upstream and the caller get from a kept allow).
 * The most any decision cache inside nginx can reach while the identity is promised.
 */
export function answerSubrequestWithIdentity(config: string): string {
  let edited = answerSubrequestInNginx(config)
  const fields = { ...IDENTITY, 'x-request-id': 'r-1', ...RATE_LIMIT }
  for (const [header, value] of Object.entries(fields)) {
    // nginx.conf's variable for the header: x-auth-token-id → $tg_token_id.
    const name = header.replace(/^x-(auth-)?/, '').replaceAll('-', '_')
    edited = editConfig(
      edited,
      new RegExp(`auth_request_set \\$tg_${name} [^;]*;`),
      `set $tg_${name} '${value}';`,
    )
  }
  return edited
}

/** A new dir on tmpfs (/dev/shm) when the machine has one, else in the temp dir. */
function cacheParent(): string {
  const shm = '/dev/shm'
  return mkdtempSync(join(existsSync(shm) ? shm : tmpdir(), 'tokengate-bench-nginx-cache-'))
}
