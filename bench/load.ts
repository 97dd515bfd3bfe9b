/**
 * One timed load run with `wrk` (Debian package), or autocannon when wrk is absent.
 * A pool request rotates through a file of tokens (one per line), so no token repeats
 * until the whole pool has been sent: with wrk through a small Lua script, with autocannon
 * through a `requests` array.
 */
import { execFile, execFileSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** The Node flags production starts with (bin/tokengate.js's `#!` line, `npm start`, the image). */
export { PRODUCTION_NODE_FLAGS } from '../src/lib/serving-process.ts'

export interface LoadRequest {
  readonly url: string
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  /** Rotate `Authorization: Bearer <line>` (and X-Tenant-Id, when given) through a file. */
  readonly pool?: { readonly file: string; readonly tenant?: string }
  readonly durationSec: number
  readonly connections: number
}

export interface LoadResult {
  readonly rps: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly requests: number
  /** Responses whose status is not 2xx or 3xx. */
  readonly non2xx: number
}

export type LoadTool = 'wrk' | 'autocannon'

export function loadTool(): LoadTool {
  return commandExists('wrk') ? 'wrk' : 'autocannon'
}

/** Whether `command` is on the PATH (wrk, taskset). */
export function commandExists(command: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

const ROTATE_LUA = `
local tokens = {}
local i = 0
local tenant = nil
local path = "/"
function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then tokens[#tokens + 1] = line end
  end
  tenant = args[2]
  path = args[3]
  i = math.random(#tokens)
end
function request()
  i = i % #tokens + 1
  local headers = { ["Authorization"] = "Bearer " .. tokens[i] }
  if tenant and #tenant > 0 then headers["X-Tenant-Id"] = tenant end
  return wrk.format("GET", path, headers)
end
`

/** Runs one load test; `cpu` pins the load generator when taskset is available. */
export function runLoad(tool: LoadTool, request: LoadRequest, cpu?: number): Promise<LoadResult> {
  return tool === 'wrk' ? runWrk(request, cpu) : runAutocannon(request)
}

function runWrk(request: LoadRequest, cpu?: number): Promise<LoadResult> {
  const argv = [
    '-t1',
    `-c${request.connections}`,
    `-d${request.durationSec}s`,
    '--latency',
    '--timeout',
    '5s',
  ]
  for (const [name, value] of Object.entries(request.headers)) argv.push('-H', `${name}: ${value}`)
  if (request.pool) {
    const script = join(tmpdir(), 'tokengate-bench-rotate.lua')
    writeFileSync(script, ROTATE_LUA)
    argv.push('-s', script, `${request.url}${request.path}`, '--', request.pool.file)
    argv.push(request.pool.tenant ?? '', request.path)
  } else {
    argv.push(`${request.url}${request.path}`)
  }
  const [command, args] =
    cpu === undefined ? ['wrk', argv] : ['taskset', ['-c', String(cpu), 'wrk', ...argv]]
  return new Promise((resolve, reject) => {
    execFile(command, args, { encoding: 'utf8' }, (error, stdout) => {
      if (error) return reject(error)
      resolve(parseWrk(stdout))
    })
  })
}

function toMs(value: string): number {
  const match = /^([\d.]+)(us|ms|s)$/.exec(value.trim())
  if (!match) return Number.NaN
  const n = Number(match[1])
  return match[2] === 'us' ? n / 1000 : match[2] === 's' ? n * 1000 : n
}

export function parseWrk(output: string): LoadResult {
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(output)?.[1] ?? Number.NaN)
  const requests = Number(/(\d+) requests in/.exec(output)?.[1] ?? 0)
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(output)?.[1] ?? 0)
  const p50 = /^\s+50%\s+(\S+)/m.exec(output)?.[1] ?? ''
  const p99 = /^\s+99%\s+(\S+)/m.exec(output)?.[1] ?? ''
  return { rps, requests, non2xx, p50Ms: toMs(p50), p99Ms: toMs(p99) }
}

async function runAutocannon(request: LoadRequest): Promise<LoadResult> {
  // autocannon ships no types; only the fields read below are relied on.
  const { default: autocannon } = (await import('autocannon' as string)) as {
    default: (options: object) => Promise<{
      requests: { average: number; total: number }
      latency: { p50: number; p99: number }
      non2xx: number
    }>
  }
  const requests = request.pool
    ? readFileSync(request.pool.file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((token) => ({
          method: 'GET' as const,
          path: request.path,
          headers: {
            authorization: `Bearer ${token}`,
            ...(request.pool?.tenant ? { 'x-tenant-id': request.pool.tenant } : {}),
          },
        }))
    : undefined
  const result = await autocannon({
    url: `${request.url}${request.path}`,
    connections: request.connections,
    duration: request.durationSec,
    headers: { ...request.headers },
    ...(requests ? { requests } : {}),
  })
  return {
    rps: result.requests.average,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    requests: result.requests.total,
    non2xx: result.non2xx,
  }
}

/** Ticks of /proc/<pid>/stat's utime + stime (fields 14 and 15) per second. */
const CLOCK_TICKS = Number(
  commandExists('getconf') ? execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }) : 100,
)

/**
 * CPU time (user + system) of a process and its descendants (e.g. the workers) so far, in
 * µs; undefined without /proc or once the process is gone.
 */
export function cpuMicros(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // Fields after the parenthesised command name, which may itself contain spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const own = ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .split(' ')
      .filter(Boolean)
      .map(Number)
    return own + children.reduce((sum, child) => sum + (cpuMicros(child) ?? 0), 0)
  } catch {
    return undefined
  }
}
