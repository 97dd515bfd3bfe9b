/**
 * CPU per request of each process on the decision hop (issue #36): nginx + tokengate's
 * decision listener with the shipped example (keepalive), the same without keepalive, and
 * with the decision cache (nginx.conf's proxy_cache, and nginx-lua.conf's Lua shared dict when
 * Debian's Lua module is installed), at one evenly paced rate, alternating rounds. CPU time, unlike
 * latency, stays readable on a shared machine: it is what each process spent, not how long
 * it waited for a core.
 *
 * Everything runs as in `latency.bench.ts --hops`: nginx, tokengate and the upstream on CPU 0,
 * the load on CPU 1; the sum of the three columns is what one request costs that core.
 *
 * `--unix`: two more rows with the decision listener on a Unix socket (decision.socket;
 * nginx's decision upstream `server unix:<path>`), uncached and cached, asking a second
 * tokengate (the same bench server with `--decision-socket`), whose CPU they report.
 * `--rows 'a;b'`: only those rows (e.g. `--rows 'nginx + decision;nginx + decision (unix)'`).
 * `--saturated`: wrk (32 connections, CPU 1) instead of the paced rate, as `npm run bench`'s
 * hop rows load them: many requests share each wake-up, so the per-request costs are lower.
 * `--baseline DIR` (another tree: a `git archive` with node_modules linked): beside each row
 * that runs one of examples/forward-auth's nginx configs, `<row>@baseline` running DIR's config
 * (built by DIR's bench/servers/nginx.ts, asking this tree's tokengate), interleaved round by
 * round, with the nginx µs/req of this tree − DIR paired by round: an A/B of the nginx
 * examples; and one more row, 'nginx + decision (unix, baseline)', whose tokengate runs from
 * DIR: an A/B of the decision listener, interleaved with the unix row. `--rows` picks a row's
 * `@baseline` twin with it. The eleventh session's Lua change (nginx µs/req of a hit):
 *   flock -x /tmp/bench.lock node_modules/.bin/node bench/hop-cpu.ts --saturated --rounds 3
 *     --duration 3 --rows 'nginx;nginx + decision (lua cached)' --baseline /tmp/bench-co/6bc71d0
 * `--cache-variants 'a,b'`: one more row per variant of the cached unix row, its nginx config
 * changed as CACHE_VARIANTS says (what-ifs for the cached path's nginx cost, not shipped).
 * `--tokengate-flags '...'`: Node flags for the unix rows' tokengate(s) (e.g. `--cpu-prof
 * --cpu-prof-dir=DIR`).
 *
 * Usage: node bench/hop-cpu.ts [--rate 2000] [--duration 4] [--rounds 3] [--unix] [--rows ...]
 *   [--saturated] [--baseline DIR] [--tokengate-flags FLAGS] [--cache-variants ...] [--help]
 */

import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { NGINX_LUA_MODULE } from '../test/decision/harness.ts'
import { exitWithUsage, readCli } from './cli.ts'
import { loadFixtures } from './fixtures.ts'
import { bearer } from './latency-cases.ts'
import { runLatency } from './latency-load.ts'
import { LatencyServers, LOAD_CPU, SERVER_CPU, type ServerId } from './latency-servers.ts'
import { median } from './latency-stats.ts'
import { cpuMicros, PRODUCTION_NODE_FLAGS, runLoad } from './load.ts'
import { freePort, startNode } from './processes.ts'
import {
  answerSubrequestInNginx,
  answerSubrequestWithIdentity,
  editConfig,
  type RunningNginx,
  startNginx,
} from './servers/nginx.ts'

const CLI = {
  script: 'bench/hop-cpu.ts',
  options: {
    rate: { type: 'number', default: 2000 },
    duration: { type: 'number', value: 'SEC', default: 4 },
    rounds: { type: 'number', integer: true, default: 3 },
    unix: { type: 'boolean' },
    rows: { type: 'string', value: "'ROW;ROW'" },
    saturated: { type: 'boolean' },
    baseline: { type: 'string', value: 'DIR' },
    'tokengate-flags': { type: 'flags', default: '' },
    'cache-variants': { type: 'string', value: "'VARIANT,VARIANT'", default: '' },
  },
} as const
const { values } = readCli(CLI)
/** Edits of the cached unix row's nginx config, each a row of its own with --cache-variants. */
const CACHE_VARIANTS: Record<string, (config: string) => string> = {
  // The floor of any auth_request and the same sending the allow's headers (servers/nginx.ts).
  'subrequest floor': answerSubrequestInNginx,
  'subrequest floor + identity': answerSubrequestWithIdentity,
  // The example's open_file_cache taken out: a hit's cache file opened and closed each time.
  'no open_file_cache': (config) => editConfig(config, /open_file_cache [^;]*;/, ''),
  // One directory for the cache files instead of two levels.
  'no levels': (config) => editConfig(config, / levels=1:2/, ''),
  // The credential itself in the key (what the digest replaced): the perl_set's cost.
  'no perl digest': (config) =>
    editConfig(
      config,
      /proxy_cache_key "\$tokengate_credential_digest/,
      'proxy_cache_key "$http_authorization',
    ),
}
const VARIANTS = values['cache-variants']
  .split(',')
  .map((name) => name.trim())
  .filter((name) => name !== '')
for (const name of VARIANTS) {
  if (!(name in CACHE_VARIANTS)) exitWithUsage(CLI, `--cache-variants: no variant ${name}`)
}
const variantRow = (name: string) => `nginx + decision (unix, cached, ${name})` as const
const BASELINE_ROW = 'nginx + decision (unix, baseline)' as const
const TOKENGATE_FLAGS = values['tokengate-flags'].split(' ').filter((flag) => flag !== '')
const RATE = values.rate
const DURATION = values.duration
const ROUNDS = values.rounds
const UNIX_ROWS = ['nginx + decision (unix)', 'nginx + decision (unix, cached)'] as const
/** examples/forward-auth/nginx-lua.conf: allows kept in a Lua shared dict (its own nginx). */
const LUA_ROW = 'nginx + decision (lua cached)' as const
/** The rows that run an example nginx config, as bench/servers/nginx.ts's startNginx options. */
const EXAMPLE_ROWS = {
  'nginx + decision': {},
  'nginx + decision (no keepalive)': { keepalive: false },
  'nginx + decision (cached)': { cache: true },
  [LUA_ROW]: { lua: true },
} as const
type ExampleRow = keyof typeof EXAMPLE_ROWS
const AT_BASELINE = '@baseline'
const atBaseline = (row: ExampleRow) => `${row}${AT_BASELINE}` as const
type RowId =
  | ServerId
  | typeof LUA_ROW
  | (typeof UNIX_ROWS)[number]
  | typeof BASELINE_ROW
  | ReturnType<typeof variantRow>
  | ReturnType<typeof atBaseline>
const THIS_TREE_ROWS: RowId[] = [
  'nginx',
  'nginx + decision',
  'nginx + decision (no keepalive)',
  'nginx + decision (cached)',
  ...(existsSync(NGINX_LUA_MODULE) ? [LUA_ROW] : []),
  ...(values.unix || values.baseline !== undefined || VARIANTS.length > 0 ? UNIX_ROWS : []),
  ...(values.baseline !== undefined ? [BASELINE_ROW] : []),
  ...VARIANTS.map(variantRow),
]
const ALL_ROWS = THIS_TREE_ROWS.flatMap((row): RowId[] =>
  values.baseline !== undefined && row in EXAMPLE_ROWS
    ? [row, atBaseline(row as ExampleRow)]
    : [row],
)
const picked = values.rows?.split(';').map((row) => row.trim())
const ROWS = picked
  ? ALL_ROWS.filter((row) => picked.includes(row) || picked.includes(exampleRowOf(row) ?? ''))
  : ALL_ROWS
/** The example row a `@baseline` row repeats with DIR's config. */
function exampleRowOf(row: RowId): ExampleRow | undefined {
  return row.endsWith(AT_BASELINE) ? (row.slice(0, -AT_BASELINE.length) as ExampleRow) : undefined
}

const fixtures = loadFixtures(join(tmpdir(), 'tokengate-latency-fixtures'))
const servers = new LatencyServers(fixtures)
const cpu = new Map<
  RowId,
  { nginx: number[]; tokengate: number[]; upstream: number[]; p50: number[]; rps: number[] }
>()
const socketDir = mkdtempSync(join(tmpdir(), 'tokengate-hop-cpu-'))
const unixNginx: RunningNginx[] = []
const unixTokengates = new Map<RowId, ChildProcess>()
try {
  const gateway = await servers.get('gateway')
  const upstream = await servers.get('upstream')
  const upstreamPort = Number(new URL(upstream.url).port)
  /** The unix rows' own tokengate (its decision listener on the socket) and nginx. */
  const unixRows = new Map<RowId, { child: ChildProcess; url: string }>()
  /** Starts a tokengate from `tree` (this one: '') deciding on a socket, and nginx for `rows`. */
  const unixSetup = async (
    tree: string,
    name: string,
    rows: [RowId, boolean, ((config: string) => string)?][],
  ) => {
    const wanted = rows.filter(([id]) => ROWS.includes(id))
    if (wanted.length === 0) return
    const socket = join(socketDir, `${name}.sock`)
    const started = await startNode(SERVER_CPU, [
      ...PRODUCTION_NODE_FLAGS,
      ...TOKENGATE_FLAGS,
      join(tree, 'bench/servers/tokengate.ts'),
      fixtures.dir,
      String(await freePort()),
      upstream.url,
      `--decision-socket=${socket}`,
    ])
    for (const [id, cache, edit] of wanted) {
      unixTokengates.set(id, started.child)
      const nginx = await startNginx(upstreamPort, 0, {
        cpu: SERVER_CPU,
        cache,
        decisionSocket: socket,
        edit,
      })
      unixNginx.push(nginx)
      unixRows.set(id, { child: nginx.child, url: nginx.guarded })
    }
  }
  await unixSetup('', 'decision', [
    ['nginx + decision (unix)', false],
    ['nginx + decision (unix, cached)', true],
    ...VARIANTS.map((name): [RowId, boolean, (c: string) => string] => [
      variantRow(name),
      true,
      CACHE_VARIANTS[name] as (c: string) => string,
    ]),
  ])
  if (values.baseline) await unixSetup(values.baseline, 'baseline', [[BASELINE_ROW, false]])
  // The lua row and the @baseline rows ask the gateway's decision port over TCP, as the
  // `(cached)` row does.
  const { decisionPort } = gateway as typeof gateway & { decisionPort: number }
  if (ROWS.includes(LUA_ROW)) {
    const nginx = await startNginx(upstreamPort, decisionPort, { cpu: SERVER_CPU, lua: true })
    unixNginx.push(nginx)
    unixRows.set(LUA_ROW, { child: nginx.child, url: nginx.guarded })
  }
  for (const id of ROWS) {
    const example = exampleRowOf(id)
    if (example === undefined || values.baseline === undefined) continue
    const nginx = await (await baselineStartNginx(values.baseline, EXAMPLE_ROWS[example]))(
      upstreamPort,
      decisionPort,
      { cpu: SERVER_CPU, ...EXAMPLE_ROWS[example] },
    )
    unixNginx.push(nginx)
    unixRows.set(id, { child: nginx.child, url: nginx.guarded })
  }
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 ? [...ROWS].reverse() : ROWS
    for (const id of order) {
      const unix = unixRows.get(id)
      const server = unix ?? (await servers.get(id as ServerId))
      const unixTokengate = unixTokengates.get(id)
      const tokengate = unixTokengate ? { child: unixTokengate } : gateway
      const before = {
        nginx: cpuMicros(server.child.pid) ?? 0,
        tg: cpuMicros(tokengate.child.pid) ?? 0,
        up: cpuMicros(upstream.child.pid) ?? 0,
      }
      const request = {
        url: server.url,
        path: '/api/v1/projects/p1',
        headers: bearer(fixtures.patSingle),
      }
      const { n, p50, rps } = values.saturated
        ? await runLoad(
            'wrk',
            { ...request, durationSec: DURATION, connections: 32 },
            LOAD_CPU,
          ).then((r) => {
            if (r.non2xx > 0) throw new Error(`${id}: ${r.non2xx} answers not 2xx`)
            return { n: r.requests, p50: r.p50Ms, rps: r.rps }
          })
        : await runLatency('paced', request, {
            rate: RATE,
            durationSec: DURATION,
            warmupSec: 0,
            connections: 32,
            cpu: LOAD_CPU,
          }).then((r) => ({ n: r.summary.count, p50: r.summary.p50Ms, rps: RATE }))
      const row = cpu.get(id) ?? { nginx: [], tokengate: [], upstream: [], p50: [], rps: [] }
      row.nginx.push(((cpuMicros(server.child.pid) ?? 0) - before.nginx) / n)
      row.tokengate.push(((cpuMicros(tokengate.child.pid) ?? 0) - before.tg) / n)
      row.upstream.push(((cpuMicros(upstream.child.pid) ?? 0) - before.up) / n)
      row.p50.push(p50)
      row.rps.push(rps)
      cpu.set(id, row)
      process.stderr.write(`round ${round + 1} ${id}: ${n} 2xx\n`)
    }
  }
  console.log(
    `\n| ${values.saturated ? 'wrk -c32' : `${RATE} req/s`}, ${ROUNDS} × ${DURATION} s | nginx CPU µs/req | tokengate CPU µs/req | upstream CPU µs/req | all three (per round) | p50 ms | req/s |`,
  )
  console.log('|---|---:|---:|---:|---:|---:|---:|')
  for (const id of ROWS) {
    const row = cpu.get(id)
    if (!row) continue
    const f = (xs: number[]) =>
      `${median(xs).toFixed(1)} (${xs.map((x) => x.toFixed(0)).join(', ')})`
    const all = row.nginx.map((x, i) => x + (row.tokengate[i] ?? 0) + (row.upstream[i] ?? 0))
    console.log(
      `| ${id} | ${f(row.nginx)} | ${f(row.tokengate)} | ${f(row.upstream)} | ${f(all)} | ${median(row.p50).toFixed(3)} | ${median(row.rps).toFixed(0)} |`,
    )
  }
  const alone = cpu.get('nginx')
  if (alone) {
    // What one core's saturated rate would be, relative to nginx alone: 1 / all three.
    const allOf = (row: NonNullable<typeof alone>) =>
      median(row.nginx.map((x, i) => x + (row.tokengate[i] ?? 0) + (row.upstream[i] ?? 0)))
    const ratios = ROWS.filter((id) => id !== 'nginx' && cpu.has(id)).map(
      (id) => `${id} ${(allOf(alone) / allOf(cpu.get(id) as typeof alone)).toFixed(2)}`,
    )
    console.log(`\nnginx alone / row, by CPU of all three: ${ratios.join('; ')}`)
  }
  for (const id of ROWS) {
    const example = exampleRowOf(id)
    const [ours, theirs] = example ? [cpu.get(example), cpu.get(id)] : []
    if (!ours || !theirs) continue
    // Paired by round, as the decision listener's A/B below.
    const diffs = ours.nginx.map((x, i) => x - (theirs.nginx[i] ?? Number.NaN))
    const lower = diffs.filter((d) => d < 0).length
    console.log(
      `\nnginx µs/req of ${example}, this tree − ${AT_BASELINE}, paired by round: median ${median(diffs).toFixed(1)} (${diffs.map((d) => d.toFixed(1)).join(', ')}); lower in ${lower} of ${diffs.length} rounds`,
    )
  }
  const [mine, base] = [cpu.get('nginx + decision (unix)'), cpu.get(BASELINE_ROW)]
  if (mine && base) {
    // Paired by round (same machine state, order alternating): the A/B's readable figure.
    const diffs = mine.tokengate.map((x, i) => x - (base.tokengate[i] ?? Number.NaN))
    const lower = diffs.filter((d) => d < 0).length
    console.log(
      `\ntokengate µs/req, this tree − baseline, paired by round: median ${median(diffs).toFixed(1)} (${diffs.map((d) => d.toFixed(1)).join(', ')}); lower in ${lower} of ${diffs.length} rounds`,
    )
  }
} finally {
  for (const nginx of unixNginx) nginx.child.kill()
  for (const child of new Set(unixTokengates.values())) child.kill()
  await servers.stopAll()
  for (const nginx of unixNginx) nginx.cleanup()
  rmSync(socketDir, { recursive: true, force: true })
}

/**
 * DIR's startNginx, which builds DIR's example configs as DIR's bench ran them. A tree whose
 * startNginx lacks an option would start the wrong example without a word: refused instead.
 */
async function baselineStartNginx(
  dir: string,
  options: Readonly<Record<string, unknown>>,
): Promise<typeof startNginx> {
  const file = resolve(dir, 'bench/servers/nginx.ts')
  const source = readFileSync(file, 'utf8')
  for (const option of Object.keys(options)) {
    if (!source.includes(`readonly ${option}?:`)) {
      throw new Error(`--baseline: ${file} has no \`${option}\` option (the tree predates it)`)
    }
  }
  const module = (await import(pathToFileURL(file).href)) as typeof import('./servers/nginx.ts')
  return module.startNginx
}
