/**
 * The hop case of `npm run bench` (issue #36): one PAT request through each proxy in front of
 * the same upstream, every process on CPU 0 (proxy, tokengate, upstream: what a small node or
 * a sidecar gives), the load on CPU 1. The ratios the issue sets targets for:
 *
 * - tokengate's gateway / a bare node:http + undici proxy (bench/servers/undici-proxy.ts);
 * - nginx + `auth_request` to tokengate's decision listener / nginx alone, without the
 *   decision cache and with it (examples/forward-auth/nginx.conf, its `#cache ` lines on),
 *   over loopback TCP and, as the `(unix)` rows, over a Unix socket (decision.socket) to a
 *   second tokengate (`tokengate-decision-socket`, started with `--decision-socket`);
 * - nginx with allows kept in a Lua shared dict (examples/forward-auth/nginx-lua.conf, Debian's
 *   Lua module) / nginx alone: the `(lua cached)` row, no subrequest on a hit.
 */
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { NGINX_LUA_MODULE, NGINX_PERL_MODULE } from '../test/decision/harness.ts'
import { nginxBinary, startNginx } from './servers/nginx.ts'

export const NGINX_ROWS = [
  'nginx',
  'nginx + decision',
  'nginx + decision (cached)',
  'nginx + decision (unix)',
  'nginx + decision (unix, cached)',
  'nginx + decision (lua cached)',
] as const
type NginxRow = (typeof NGINX_ROWS)[number]
const CACHED: readonly NginxRow[] = ['nginx + decision (cached)', 'nginx + decision (unix, cached)']
const LUA: NginxRow = 'nginx + decision (lua cached)'

/** The rows that ask `tokengate-decision-socket` on the Unix socket. */
export function asksSocket(id: string): boolean {
  return id === 'nginx + decision (unix)' || id === 'nginx + decision (unix, cached)'
}

let socketPath: string | undefined
/** The decision socket of this run (a fresh temp dir; tokengate removes the file at stop). */
export function decisionSocketPath(): string {
  socketPath ??= join(mkdtempSync(join(tmpdir(), 'tokengate-bench-sock-')), 'decision.sock')
  return socketPath
}

/** The nginx rows this machine can run (nginx; the cache also needs Debian's perl module). */
export function nginxRows(): NginxRow[] {
  if (!nginxBinary()) {
    console.error('hops: nginx is not installed, no nginx rows (apt-get install nginx)')
    return []
  }
  let rows = [...NGINX_ROWS]
  if (!existsSync(NGINX_PERL_MODULE)) {
    console.error('hops: no cached rows (apt-get install libnginx-mod-http-perl)')
    rows = rows.filter((row) => !CACHED.includes(row))
  }
  if (!existsSync(NGINX_LUA_MODULE)) {
    console.error('hops: no lua cached row (apt-get install libnginx-mod-http-lua)')
    rows = rows.filter((row) => row !== LUA)
  }
  return rows
}

const HOP_CASE = 'hops: PAT through each proxy'

/**
 * The ratios the issue sets targets for: [label, subject, baseline, target]; a row without a
 * target says where the gateway's gap is: its promised headers (no gate) or its gate.
 */
const RATIOS: readonly [string, string, string, number?][] = [
  ['gateway PAT / bare undici proxy', 'tokengate-gateway', 'undici proxy', 0.85],
  [
    'undici proxy + identity headers / bare undici proxy',
    'undici proxy + identity headers',
    'undici proxy',
  ],
  [
    'gateway PAT / undici proxy + identity headers',
    'tokengate-gateway',
    'undici proxy + identity headers',
  ],
  ['nginx + decision / nginx alone', 'nginx + decision', 'nginx', 0.6],
  ['nginx + decision (cached) / nginx alone', 'nginx + decision (cached)', 'nginx', 0.9],
  ['nginx + decision (unix) / nginx alone', 'nginx + decision (unix)', 'nginx', 0.6],
  [
    'nginx + decision (unix, cached) / nginx alone',
    'nginx + decision (unix, cached)',
    'nginx',
    0.9,
  ],
  ['nginx + decision (lua cached) / nginx alone', 'nginx + decision (lua cached)', 'nginx', 0.9],
]

interface RowServer {
  readonly id: string
  port: number
  child?: ChildProcess
  cleanup?: () => void
}

/** One nginx serves the plain and the guarded row; every other row has its own. */
const started = new Map<string, ReturnType<typeof startNginx>>()

/** Starts (or joins) the nginx of `server`'s row and points the row at its listener. */
export async function startNginxRow(
  server: RowServer,
  upstreamPort: number,
  decisionPort: number,
  cpu: number | undefined,
): Promise<void> {
  const id = server.id as NginxRow
  const cache = CACHED.includes(id)
  const socket = asksSocket(id) ? decisionSocketPath() : undefined
  const variant = id === 'nginx' ? 'nginx + decision' : id
  let nginx = started.get(variant)
  const first = nginx === undefined
  if (!nginx) {
    nginx = startNginx(upstreamPort, decisionPort, {
      cpu,
      cache,
      lua: id === LUA,
      decisionSocket: socket,
    })
    started.set(variant, nginx)
  }
  const running = await nginx
  server.port = Number(new URL(id === 'nginx' ? running.plain : running.guarded).port)
  // Both rows of one nginx report its CPU; only one of them stops it.
  server.child = running.child
  // Its prefix goes once it has exited (removed while it shuts down, nginx leaves a dir).
  if (first) {
    // The socket's temp dir goes with the unix row's nginx (tokengate removes only the file).
    const done = socket
      ? () => {
          running.cleanup()
          rmSync(dirname(socket), { recursive: true, force: true })
        }
      : running.cleanup
    server.cleanup = () => {
      if (running.child.exitCode !== null || running.child.signalCode !== null) done()
      else running.child.once('exit', done)
    }
  }
}

interface HopRow {
  readonly case: string
  readonly server: string
  readonly rps: number
  readonly repeats: readonly number[]
}

/** The ratio table, median of the repeats and per repeat (adjacent runs of one round). */
export function hopRatioLines(rows: readonly HopRow[]): string[] {
  const of = (server: string) => rows.find((r) => r.case === HOP_CASE && r.server === server)
  const lines = [
    '| hop (PAT, all on CPU 0) | ratio (medians) | per repeat | target | met |',
    '|---|---:|---|---:|:-:|',
  ]
  for (const [label, subject, baseline, target] of RATIOS) {
    const a = of(subject)
    const b = of(baseline)
    if (!a || !b || b.rps === 0) continue
    const ratio = a.rps / b.rps
    const rounds = a.repeats.map((rps, i) => (rps / (b.repeats[i] ?? Number.NaN)).toFixed(2))
    const met = target === undefined ? '' : ratio >= target ? 'yes' : '**no**'
    lines.push(
      `| ${label} | ${ratio.toFixed(2)} | ${rounds.join(' ')} | ${target ?? '—'} | ${met} |`,
    )
  }
  return lines.length > 2 ? lines : []
}
