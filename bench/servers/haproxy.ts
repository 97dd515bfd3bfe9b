/**
 * HAProxy (Debian package) proxying to an upstream without authentication: one thread,
 * loopback only, keep-alive both ways, its config in a temp dir. The floor a proxy written in
 * C sets for tokengate's gateway.
 */
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort, startListening } from '../processes.ts'

export interface RunningHaproxy {
  readonly child: ChildProcess
  readonly url: string
  /** Removes the temp dir (after the process is stopped). */
  cleanup(): void
}

/** The haproxy binary, or undefined when HAProxy is not installed. */
export function haproxyBinary(): string | undefined {
  return ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((path) => existsSync(path))
}

/** Starts HAProxy (on `cpu`, when given) in front of 127.0.0.1:`upstreamPort`. */
export async function startHaproxy(
  upstreamPort: number,
  cpu?: number | string,
): Promise<RunningHaproxy> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-bench-haproxy-'))
  const config = join(dir, 'haproxy.cfg')
  writeFileSync(
    config,
    `global
  nbthread 1
  maxconn 4096

defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s

frontend bench
  bind 127.0.0.1:${port}
  default_backend upstream

backend upstream
  server upstream 127.0.0.1:${upstreamPort}
`,
  )
  try {
    const child = await startListening(
      cpu,
      haproxyBinary() ?? 'haproxy',
      ['-db', '-f', config],
      [port],
    )
    return {
      child,
      url: `http://127.0.0.1:${port}`,
      cleanup: () => rmSync(dir, { recursive: true, force: true }),
    }
  } catch (error) {
    rmSync(dir, { recursive: true, force: true })
    throw error
  }
}
