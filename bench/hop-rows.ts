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
 *
 * Beside each target, its floor in the same run: the same hop with nothing deciding. The
 * uncached rows' floors ask a do-nothing responder (bench/servers/decision-floor.ts: node:http,
 * or a bare `net` socket, answering tokengate's allow bytes) in tokengate's place, over TCP and
 * over a Unix socket as the rows they bound; the cached rows' floor is nginx answering the
 * subrequest itself while still sending the allow's headers; the gateway's is the bare relay
 * sending the promised headers (`undici proxy + identity headers`).
 */
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { NGINX_LUA_MODULE, NGINX_PERL_MODULE } from '../test/decision/harness.ts'
import type { FloorKind } from './servers/decision-floor.ts'
import { answerSubrequestWithIdentity, nginxBinary, startNginx } from './servers/nginx.ts'

/** How one nginx row is built: who answers its auth subrequest, and the example's options. */
interface NginxRowSpec {
  /** The bench/run.ts server asked (its decision port, its port or its socket); none: nginx. */
  readonly asks?: string
  readonly unix?: boolean
  readonly cache?: boolean
  readonly lua?: boolean
  readonly edit?: (config: string) => string
}

const UPSTREAM = 'upstream'
const GATEWAY = 'tokengate-gateway'
const DECISION_SOCKET = 'tokengate-decision-socket'
/** A do-nothing responder's server id (bench/servers/decision-floor.ts). */
const responder = (kind: FloorKind, unix: boolean) =>
  `decision floor: ${kind === 'http' ? 'node:http' : 'net'}${unix ? ' (unix)' : ''}`

const SPECS = {
  // nginx alone: the plain listener of the `nginx + decision` row's nginx.
  nginx: { asks: GATEWAY },
  'nginx + decision': { asks: GATEWAY },
  'nginx + decision (cached)': { asks: GATEWAY, cache: true },
  'nginx + decision (unix)': { asks: DECISION_SOCKET, unix: true },
  'nginx + decision (unix, cached)': { asks: DECISION_SOCKET, unix: true, cache: true },
  'nginx + decision (lua cached)': { asks: GATEWAY, lua: true },
  'nginx + node:http decision floor': { asks: responder('http', false) },
  'nginx + net decision floor': { asks: responder('net', false) },
  'nginx + node:http decision floor (unix)': { asks: responder('http', true), unix: true },
  'nginx + net decision floor (unix)': { asks: responder('net', true), unix: true },
  'nginx + subrequest floor + identity': { edit: answerSubrequestWithIdentity },
} as const satisfies Record<string, NginxRowSpec>
type NginxRow = keyof typeof SPECS
const NGINX_ROWS = Object.keys(SPECS) as readonly NginxRow[]
const spec = (id: NginxRow): NginxRowSpec => SPECS[id]
const CACHED = NGINX_ROWS.filter((id) => spec(id).cache)
const LUA = NGINX_ROWS.filter((id) => spec(id).lua)

/** The run.ts server that answers `id`'s auth subrequest (undefined: nginx itself, or no nginx row). */
export function askedServer(id: string): string | undefined {
  return isNginxRow(id) ? spec(id).asks : undefined
}

/** The bare node:http + undici relays (bench/servers/undici-proxy.ts, the upstream its first argument). */
export function isUndiciRelay(id: string): boolean {
  return id.startsWith('undici proxy')
}

/**
 * The bench/run.ts servers `id` cannot run without: the upstream behind a proxy, and the
 * decider an nginx row asks (its decision port, its port or its socket).
 */
export function neededServers(id: string): string[] {
  const proxy = isNginxRow(id) || id === GATEWAY || isUndiciRelay(id)
  const asked = askedServer(id)
  return [...(proxy ? [UPSTREAM] : []), ...(asked === undefined ? [] : [asked])]
}

/**
 * The servers a run starts: the chosen ones and every server they need, named or not, in
 * `defined`'s order (a decider is defined before the rows that ask it). Whoever runs the cases
 * measures only the chosen: a needed server runs no case of its own.
 */
export function serversToStart<S extends { readonly id: string }>(
  defined: readonly S[],
  chosen: readonly S[],
): S[] {
  const needed = new Set(chosen.map((server) => server.id))
  // A Set's iteration visits what is added during it: the needs of the needed too.
  for (const id of needed) for (const other of neededServers(id)) needed.add(other)
  return defined.filter((server) => needed.has(server.id))
}

/** The rows that ask `tokengate-decision-socket` on the Unix socket. */
export function asksSocket(id: string): boolean {
  return askedServer(id) === DECISION_SOCKET
}

/** The do-nothing responders `rows` ask: bench/run.ts server ids and argv (port or socket last). */
export function decisionResponders(
  rows: readonly string[],
): { id: string; argv: string[]; listen?: string }[] {
  const responders = []
  for (const kind of ['http', 'net'] as const) {
    for (const unix of [false, true]) {
      const id = responder(kind, unix)
      if (!rows.some((row) => askedServer(row) === id)) continue
      const argv = ['bench/servers/decision-floor.ts', kind]
      responders.push(unix ? { id, argv, listen: `unix:${decisionSocketPath(id)}` } : { id, argv })
    }
  }
  return responders
}

let socketDir: string | undefined
/** The socket `server` listens on in this run (a fresh temp dir, removed by removeDecisionSockets). */
export function decisionSocketPath(server = DECISION_SOCKET): string {
  socketDir ??= mkdtempSync(join(tmpdir(), 'tokengate-bench-sock-'))
  const name = server.replace(/[^a-z]+/gi, '-').replace(/^-|-$/g, '')
  return join(socketDir, `${name}.sock`)
}

/** Removes this run's decision sockets (their owners remove only the files, if anything). */
export function removeDecisionSockets(): void {
  if (socketDir) rmSync(socketDir, { recursive: true, force: true })
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
    rows = rows.filter((row) => !LUA.includes(row))
  }
  return rows
}

/** Whether `id` is one of the nginx rows (started by startNginxRow, not as a process of its own). */
export function isNginxRow(id: string): id is NginxRow {
  return Object.hasOwn(SPECS, id)
}

const HOP_CASE = 'hops: PAT through each proxy'

/**
 * The ratios of the hop case: `subject`'s rate over `baseline`'s. Those with a target are the
 * issue's; `floors` are the rows that do the same hop with nothing deciding, over the same
 * baseline: the most any decider there can reach. A ratio without a target says where a gap
 * lies (the gateway's headers or its gate) or is a floor itself.
 */
interface Ratio {
  readonly label: string
  readonly subject: string
  readonly baseline: string
  readonly target?: number
  readonly floors?: readonly string[]
}
const NGINX_ALONE = 'nginx'
const TCP_FLOORS = ['nginx + node:http decision floor', 'nginx + net decision floor']
const UNIX_FLOORS = TCP_FLOORS.map((floor) => `${floor} (unix)`)
const CACHED_FLOOR = 'nginx + subrequest floor + identity'
const overNginx = (subject: string, target?: number, floors?: readonly string[]): Ratio => ({
  label: `${subject} / nginx alone`,
  subject,
  baseline: NGINX_ALONE,
  ...(target === undefined ? {} : { target }),
  ...(floors === undefined ? {} : { floors }),
})
const RATIOS: readonly Ratio[] = [
  {
    label: 'gateway PAT / bare undici proxy',
    subject: GATEWAY,
    baseline: 'undici proxy',
    target: 0.85,
    floors: ['undici proxy + identity headers'],
  },
  {
    label: 'undici proxy + identity headers / bare undici proxy',
    subject: 'undici proxy + identity headers',
    baseline: 'undici proxy',
  },
  {
    label: 'gateway PAT / undici proxy + identity headers',
    subject: GATEWAY,
    baseline: 'undici proxy + identity headers',
  },
  overNginx('nginx + decision', 0.6, TCP_FLOORS),
  overNginx('nginx + decision (cached)', 0.9, [CACHED_FLOOR]),
  overNginx('nginx + decision (unix)', 0.6, UNIX_FLOORS),
  overNginx('nginx + decision (unix, cached)', 0.9, [CACHED_FLOOR]),
  overNginx('nginx + decision (lua cached)', 0.9, [CACHED_FLOOR]),
  ...[...TCP_FLOORS, ...UNIX_FLOORS, CACHED_FLOOR].map((floor) => overNginx(floor)),
]

interface RowServer {
  readonly id: string
  port: number
  child?: ChildProcess
  cleanup?: () => void
  /** tokengate with `--decision`: its decision listener's port. */
  decisionPort?: number
}

/** One nginx serves the plain and the guarded row; every other row has its own. */
const started = new Map<string, ReturnType<typeof startNginx>>()

/**
 * Starts (or joins) the nginx of `server`'s row, asking the row's decider among `servers`
 * (started before it), and points the row at its listener.
 */
export async function startNginxRow(
  server: RowServer,
  servers: readonly RowServer[],
  upstreamPort: number,
  cpu: number | undefined,
): Promise<void> {
  const id = server.id as NginxRow
  const { asks, unix, cache, lua, edit } = spec(id)
  // A row nginx answers itself still names a decision upstream: any port, never asked.
  let decisionPort = 9
  let socket: string | undefined
  if (asks !== undefined) {
    const asked = servers.find((s) => s.id === asks && s.child)
    if (!asked) throw new Error(`${id} needs the ${asks} row`)
    if (unix) socket = decisionSocketPath(asks)
    else decisionPort = asked.decisionPort ?? asked.port
  }
  const variant = id === 'nginx' ? 'nginx + decision' : id
  let nginx = started.get(variant)
  const first = nginx === undefined
  if (!nginx) {
    nginx = startNginx(upstreamPort, unix ? 0 : decisionPort, {
      cpu,
      cache: cache === true,
      lua: lua === true,
      ...(socket === undefined ? {} : { decisionSocket: socket }),
      ...(edit === undefined ? {} : { edit }),
    })
    started.set(variant, nginx)
  }
  const running = await nginx
  server.port = Number(new URL(id === 'nginx' ? running.plain : running.guarded).port)
  // Both rows of one nginx report its CPU; only one of them stops it.
  server.child = running.child
  // Its prefix goes once it has exited (removed while it shuts down, nginx leaves a dir).
  if (first) {
    server.cleanup = () => {
      if (running.child.exitCode !== null || running.child.signalCode !== null) running.cleanup()
      else running.child.once('exit', running.cleanup)
    }
  }
}

export interface HopRow {
  readonly case: string
  readonly server: string
  readonly rps: number
  readonly repeats: readonly number[]
}

const hopRowOf = (rows: readonly HopRow[]) => (server: string) =>
  rows.find((r) => r.case === HOP_CASE && r.server === server)
/** `a`'s repeats over `b`'s, round by round (adjacent runs of one round). */
export const perRepeat = (a: HopRow, b: HopRow) =>
  a.repeats.map((rps, i) => (rps / (b.repeats[i] ?? Number.NaN)).toFixed(2)).join(' ')

/**
 * The ratio table, median of the repeats and per repeat, then (when the run measured floors)
 * the floor table of hopFloorLines.
 */
export function hopRatioLines(rows: readonly HopRow[]): string[] {
  const of = hopRowOf(rows)
  const lines = [
    '| hop (PAT, all on CPU 0) | ratio (medians) | per repeat | target | met |',
    '|---|---:|---|---:|:-:|',
  ]
  for (const { label, subject, baseline, target } of RATIOS) {
    const a = of(subject)
    const b = of(baseline)
    if (!a || !b || b.rps === 0) continue
    const ratio = a.rps / b.rps
    const met = target === undefined ? '' : ratio >= target ? 'yes' : '**no**'
    lines.push(
      `| ${label} | ${ratio.toFixed(2)} | ${perRepeat(a, b)} | ${target ?? '—'} | ${met} |`,
    )
  }
  if (lines.length === 2) return []
  const floors = hopFloorLines(rows)
  return floors.length > 0 ? [...lines, '', ...floors] : lines
}

/**
 * Each target beside its floors from the same run: the target, what the same hop reaches with
 * nothing deciding (the floor, over the same baseline), tokengate's ratio, tokengate's rate over
 * the floor's (per repeat), and whether the target lies at or below the floor at all (by the
 * medians; in how many repeats).
 */
export function hopFloorLines(rows: readonly HopRow[]): string[] {
  const of = hopRowOf(rows)
  const lines = [
    '| hop (PAT, all on CPU 0; medians) | target | tokengate | floor: the same hop doing nothing | floor | tokengate / floor (per repeat) | target ≤ floor (repeats) |',
    '|---|---:|---:|---|---:|---|:-:|',
  ]
  for (const { label, subject, baseline, target, floors = [] } of RATIOS) {
    const a = of(subject)
    const b = of(baseline)
    if (target === undefined || !a || !b || b.rps === 0) continue
    for (const floorId of floors) {
      const floor = of(floorId)
      if (!floor || floor.rps === 0) continue
      const floorRatio = floor.rps / b.rps
      const mine = (a.rps / b.rps).toFixed(2)
      const overFloor = `${(a.rps / floor.rps).toFixed(2)} (${perRepeat(a, floor)})`
      // The medians' verdict, and in how many rounds the floor reached the target.
      const rounds = floor.repeats.filter((rps, i) => target <= rps / (b.repeats[i] ?? Number.NaN))
      const reachable = `${target <= floorRatio ? 'yes' : '**no**'} (${rounds.length} of ${floor.repeats.length})`
      lines.push(
        `| ${label} | ${target} | ${mine} | ${floorId} | ${floorRatio.toFixed(2)} | ${overFloor} | ${reachable} |`,
      )
    }
  }
  return lines.length > 2 ? lines : []
}
