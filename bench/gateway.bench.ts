/**
 * Gateway overhead: the same small upstream called directly, through a bare
 * Fastify + @fastify/reply-from proxy (the proxy library's own cost), and through tokengate
 * in gateway mode (PAT authentication, policy check, identity headers, proxy) over plain
 * HTTP and over HTTPS. Prints requests/s, p50 and p99 latency, and the ratio to direct.
 *
 * The upstream and tokengate each run in their own child process, autocannon in this one,
 * all on 127.0.0.1. Bounded: each run lasts DURATION_SEC with CONNECTIONS connections,
 * after a short warm-up.
 *
 * Run: `./node_modules/.bin/node bench/gateway.bench.ts`
 * (options: `--duration 5 --connections 32`).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'

/** The part of autocannon's programmatic API used here (the package ships no types). */
type Autocannon = (options: {
  url: string
  connections: number
  duration: number
  headers: Record<string, string>
}) => Promise<{
  requests: { average: number }
  latency: { p50: number; p99: number }
  errors: number
  timeouts: number
  non2xx: number
}>
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon

const { values } = parseArgs({
  options: {
    role: { type: 'string' },
    upstream: { type: 'string' },
    https: { type: 'boolean', default: false },
    duration: { type: 'string', default: '5' },
    connections: { type: 'string', default: '32' },
  },
})

const BODY = JSON.stringify({ id: 'p1', name: 'Apollo', tags: ['a', 'b', 'c'] })

/** Child role: the upstream, answering every request with a small JSON body. */
async function runUpstream(): Promise<void> {
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(BODY)
    })
  })
  server.keepAliveTimeout = 65_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  report({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })
}

/**
 * Child role: a bare Fastify + @fastify/reply-from proxy with the same pool settings and no
 * authentication: the floor of what the proxy library alone costs on this machine.
 */
async function runBareProxy(upstream: string): Promise<void> {
  const { default: Fastify } = await import('fastify')
  const { default: replyFrom } = await import('@fastify/reply-from')
  const app = Fastify()
  await app.register(replyFrom, {
    base: upstream,
    disableRequestLogging: true,
    retryMethods: [],
    undici: { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 },
  })
  app.all('/*', (request, reply) => reply.from(request.url))
  report({ url: await app.listen({ host: '127.0.0.1', port: 0 }) })
}

/** Child role: tokengate in gateway mode with one tenant and one PAT. */
async function runGateway(upstream: string, https: boolean): Promise<void> {
  const { loadConfig } = await import('../src/config/load.ts')
  const { issuePat } = await import('../src/core/pat.ts')
  const { startTokengate } = await import('../src/main.ts')
  const { openStore } = await import('../src/stores/open-store.ts')
  const { ensureDevCertificate } = await import('../src/server/tls.ts')
  const { ConfigSchema } = await import('../src/config/schema.ts')
  const dataDir = mkdtempSync(join(tmpdir(), 'tokengate-bench-'))
  process.on('exit', () => rmSync(dataDir, { recursive: true, force: true }))
  const store = await openStore({ dataDir })
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: 'acme', name: 'Acme' }, now)
  const { token, record } = issuePat({
    tenantId: 'acme',
    subject: 'bench',
    name: 'bench',
    permissions: ['projects:read'],
    expiresAt: now + 86_400_000,
    now,
  })
  await store.insertPat(record)
  await store.close()
  // HTTPS with the self-signed dev certificate (autocannon does not verify certificates).
  if (https) await ensureDevCertificate(dataDir)
  const tls = https
    ? {
        tlsCertFile: join(dataDir, 'tls', 'dev-cert.pem'),
        tlsKeyFile: join(dataDir, 'tls', 'dev-key.pem'),
      }
    : {}
  const config = loadConfig({
    env: {},
    overrides: {
      dataDir,
      dev: false,
      server: { host: '127.0.0.1', port: 0, plainHttp: !https, ...tls },
      log: { level: 'silent' },
      // One token drives the whole load: per-token limits would measure the limiter instead.
      ...('rateLimit' in ConfigSchema.properties ? { rateLimit: { enabled: false } } : {}),
      gateway: { upstream },
    },
  })
  const running = await startTokengate(config)
  process.once('SIGTERM', () => void running.close().then(() => process.exit(0)))
  report({ url: running.url, token })
}

function report(message: object): void {
  process.stdout.write(`${JSON.stringify(message)}\n`)
}

/** Starts this file in a child role; resolves with the first JSON line it prints. */
function startChild(
  args: string[],
): Promise<{ child: ChildProcess; info: Record<string, string> }> {
  const child = spawn(process.execPath, [import.meta.filename, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
    lines.once('line', (line) => resolve({ child, info: JSON.parse(line) }))
    child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited with ${code}`)))
  })
}

interface Result {
  readonly target: string
  readonly 'req/s': number
  readonly 'p50 ms': number
  readonly 'p99 ms': number
  readonly errors: number
  readonly non2xx: number
}

async function load(target: string, url: string, headers: Record<string, string>) {
  const connections = Number(values.connections)
  const options = { url: `${url}/api/v1/projects/p1`, connections, headers }
  await autocannon({ ...options, duration: 1 })
  const result = await autocannon({ ...options, duration: Number(values.duration) })
  return {
    target,
    'req/s': Math.round(result.requests.average),
    'p50 ms': result.latency.p50,
    'p99 ms': result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
  } satisfies Result
}

async function main(): Promise<void> {
  const children: ChildProcess[] = []
  try {
    const upstream = await startChild(['--role', 'upstream'])
    children.push(upstream.child)
    const plain = await startChild(['--role', 'gateway', '--upstream', upstream.info.url as string])
    children.push(plain.child)
    const bare = await startChild(['--role', 'bare', '--upstream', upstream.info.url as string])
    children.push(bare.child)
    const tls = await startChild([
      '--role',
      'gateway',
      '--https',
      '--upstream',
      upstream.info.url as string,
    ])
    children.push(tls.child)
    const auth = (token: string | undefined) => ({ authorization: `Bearer ${token}` })

    const direct = await load('direct (http)', upstream.info.url as string, {})
    const viaBare = await load('bare reply-from (http)', bare.info.url as string, {})
    const viaHttp = await load('gateway (http)', plain.info.url as string, auth(plain.info.token))
    const viaHttps = await load('gateway (https)', tls.info.url as string, auth(tls.info.token))
    const rows = [direct, viaBare, viaHttp, viaHttps].map((row) => ({
      ...row,
      'ratio req/s': Math.round((row['req/s'] / direct['req/s']) * 100) / 100,
    }))
    console.log(
      `Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ` +
        `${values.duration} s × ${values.connections} connections, ${new Date().toISOString()}`,
    )
    console.table(rows)
  } finally {
    for (const child of children) child.kill('SIGTERM')
  }
}

if (values.role === 'upstream') await runUpstream()
else if (values.role === 'bare') await runBareProxy(values.upstream as string)
else if (values.role === 'gateway') await runGateway(values.upstream as string, values.https)
else await main()
