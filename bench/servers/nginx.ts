/**
 * One nginx process (single worker, no master, loopback only, files in a temp dir) with two
 * listeners in front of the same upstream: `plain`, a bare `proxy_pass` (no auth), and
 * `guarded`, the documented forward-auth config (examples/forward-auth/nginx.conf: every
 * request asks tokengate's decision listener through `auth_request`), with the documented
 * decision cache turned on when `cache` is set (docs/forward-auth.md).
 */
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { withDecisionCache } from '../../test/decision/harness.ts'
import { freePort, startListening } from '../processes.ts'

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

/** Starts nginx (on `cpu`, when given) proxying to the upstream and asking the decision port. */
export async function startNginx(
  upstreamPort: number,
  decisionPort: number,
  options: { readonly cpu?: number | string; readonly cache?: boolean } = {},
): Promise<RunningNginx> {
  const { cpu } = options
  const binary = nginxBinary() ?? 'nginx'
  const [plain, guarded] = [await freePort(), await freePort()]
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-bench-nginx-'))
  const example = readFileSync(
    join(import.meta.dirname, '../../examples/forward-auth/nginx.conf'),
    'utf8',
  )
    .replaceAll('127.0.0.1:8080', `127.0.0.1:${guarded}`)
    .replaceAll('127.0.0.1:8081', `127.0.0.1:${decisionPort}`)
    .replaceAll('127.0.0.1:3000', `127.0.0.1:${upstreamPort}`)
  writeFileSync(
    join(dir, 'tokengate.conf'),
    options.cache ? withDecisionCache(example, join(dir, 'cache')) : example,
  )
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
worker_processes 1;
pid ${join(dir, 'nginx.pid')};
error_log stderr error;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  include ${join(dir, 'tokengate.conf')};
  server {
    listen 127.0.0.1:${plain};
    location / {
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://app;
    }
  }
}
`,
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
      cleanup: () => rmSync(dir, { recursive: true, force: true }),
    }
  } catch (error) {
    rmSync(dir, { recursive: true, force: true })
    throw error
  }
}
