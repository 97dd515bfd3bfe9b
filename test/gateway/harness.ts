/**
 * Gateway test harness: a real upstream HTTP server that records what reaches it, and a
 * real tokengate (plain HTTP on 127.0.0.1:0; the sources or the installed package, see
 * helpers/launch.ts) in gateway mode in front of it, with a SQLite store holding two
 * tenants, a trusted test issuer, and a helper to issue PATs.
 */
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before } from 'node:test'
import { issuePat } from '../../src/core/pat.ts'
import { openStore } from '../../src/stores/open-store.ts'
import { createTestIssuer, TEST_TENANT, type TestIssuer } from '../helpers/jwt.ts'
import { type Launched, launchTokengate } from '../helpers/launch.ts'

export const OTHER_TENANT = 'tenant-b'

/** What the upstream saw of one request. */
export interface SeenRequest {
  readonly method: string
  readonly url: string
  readonly headers: IncomingHttpHeaders
  readonly rawHeaders: readonly string[]
  readonly bodyBytes: number
  readonly bodySha256: string
}

export interface Upstream {
  readonly url: string
  readonly port: number
  readonly seen: SeenRequest[]
  /** Requests whose head has arrived and whose body has not ended yet. */
  readonly receiving: number
  close(): Promise<void>
}

/** Deterministic pseudo-random bytes, so both sides can hash a large download. */
export function patternBytes(size: number): Buffer {
  const buffer = Buffer.allocUnsafe(size)
  let x = 0x12345678
  for (let i = 0; i < size; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0
    buffer[i] = x >>> 24
  }
  return buffer
}

export function sha256(data: Buffer | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex')
}

/**
 * Routes of the test upstream (any method):
 * - `/api/v1/slow`: never answers;
 * - `/api/v1/download?bytes=N`: streams N pattern bytes in 64 KiB chunks;
 * - `/api/v1/hop`: answers with hop-by-hop response headers;
 * - anything else: 200 JSON `{ method, url, headers, bodyBytes, bodySha256 }`.
 */
export async function startUpstream(): Promise<Upstream> {
  const seen: SeenRequest[] = []
  let receiving = 0
  const server: Server = createServer((req, res) => {
    receiving++
    let counted = true
    const done = () => {
      if (counted) receiving--
      counted = false
    }
    req.once('close', done)
    const hash = createHash('sha256')
    let bytes = 0
    req.on('data', (chunk: Buffer) => {
      bytes += chunk.length
      hash.update(chunk)
    })
    req.on('end', () => {
      done()
      const record: SeenRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        bodyBytes: bytes,
        bodySha256: hash.digest('hex'),
      }
      seen.push(record)
      const url = new URL(req.url ?? '/', 'http://upstream')
      if (url.pathname === '/api/v1/slow') return
      if (url.pathname === '/api/v1/download') {
        const data = patternBytes(Number(url.searchParams.get('bytes') ?? '0'))
        res.writeHead(200, { 'content-type': 'application/octet-stream' })
        let offset = 0
        const pump = () => {
          while (offset < data.length) {
            const chunk = data.subarray(offset, offset + 65_536)
            offset += chunk.length
            if (!res.write(chunk)) return void res.once('drain', pump)
          }
          res.end()
        }
        pump()
        return
      }
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'x-request-id': 'upstream-id',
      }
      if (url.pathname === '/api/v1/hop') {
        Object.assign(headers, {
          connection: 'x-secret-hop, keep-alive',
          'x-secret-hop': 'must not reach the caller',
          'keep-alive': 'timeout=5',
          'proxy-authenticate': 'Basic realm="inner"',
        })
      }
      res.writeHead(200, headers)
      res.end(JSON.stringify({ ...record, rawHeaders: undefined }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    get receiving() {
      return receiving
    },
    async close() {
      const done = new Promise<void>((resolve) => server.close(() => resolve()))
      server.closeAllConnections()
      await done
    },
  }
}

export interface GatewayOptions {
  readonly upstream: string
  /** Policy text (YAML), written to a file in the data directory. */
  readonly policy?: string
  readonly timeoutMs?: number
  readonly stripAuthorization?: boolean
  readonly plainHttp?: boolean
  /** Further `gateway.*` settings. */
  readonly gateway?: Readonly<Record<string, unknown>>
  /** Further `server.*` settings. */
  readonly server?: Readonly<Record<string, unknown>>
}

export interface Gateway {
  readonly url: string
  /** The data directory (its SQLite store holds the audit rows). */
  readonly dataDir: string
  readonly issuer: TestIssuer
  readonly running: Launched
  /** The policy file the gateway reads, when `policy` was given. */
  readonly policyFile: string | undefined
  /** Issues a PAT for `tenant` (default TEST_TENANT) with `permissions`. */
  pat(permissions: readonly string[], tenant?: string): Promise<string>
  /** A JWT for TEST_TENANT (or `claims.tenant_id`) with `permissions`. */
  jwt(permissions: readonly string[], claims?: Record<string, unknown>): Promise<string>
  close(): Promise<void>
}

/** An upstream and the gateway in front of it, for the tests of one `describe` block. */
export interface ProxiedGateway {
  readonly upstream: Upstream
  readonly gateway: Gateway
}

/**
 * Starts an upstream and a gateway with `options` in front of it before the enclosing
 * `describe` block's tests and stops both after them; call it in the block's body.
 */
export function useProxiedGateway(options: Omit<GatewayOptions, 'upstream'>): ProxiedGateway {
  const started: { upstream?: Upstream; gateway?: Gateway } = {}
  before(async () => {
    started.upstream = await startUpstream()
    started.gateway = await startGateway({ ...options, upstream: started.upstream.url })
  })
  after(async () => {
    await started.gateway?.close()
    await started.upstream?.close()
  })
  return {
    get upstream() {
      return started.upstream as Upstream
    },
    get gateway() {
      return started.gateway as Gateway
    },
  }
}

export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const dataDir = mkdtempSync(join(tmpdir(), 'tokengate-gw-'))
  const issuer = createTestIssuer()
  const store = await openStore({ dataDir })
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: TEST_TENANT, name: 'Tenant A' }, now)
  await store.createTenant({ id: OTHER_TENANT, name: 'Tenant B' }, now)
  await store.putIssuer(issuer.config, now)

  let policyFile: string | undefined
  if (options.policy !== undefined) {
    policyFile = join(dataDir, 'policy.yaml')
    writeFileSync(policyFile, options.policy)
  }
  const overrides = {
    dataDir,
    server: {
      host: '127.0.0.1',
      port: 0,
      plainHttp: options.plainHttp ?? true,
      ...options.server,
    },
    log: { level: 'silent' },
    gateway: {
      upstream: options.upstream,
      ...(policyFile ? { policyFile } : {}),
      ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
      ...(options.stripAuthorization === false ? { stripAuthorization: false } : {}),
      ...options.gateway,
    },
  }
  let running: Launched
  try {
    running = await launchTokengate(overrides)
  } catch (error) {
    await store.close()
    rmSync(dataDir, { recursive: true, force: true })
    throw error
  }

  return {
    url: running.url,
    dataDir,
    issuer,
    running,
    policyFile,
    async pat(permissions, tenant = TEST_TENANT) {
      const { token, record } = issuePat({
        tenantId: tenant,
        subject: 'ci-bot',
        name: 'test',
        permissions,
        expiresAt: Date.now() + 3_600_000,
        now: Date.now(),
      })
      await store.insertPat(record)
      return token
    },
    jwt: (permissions, claims = {}) => issuer.sign({ permissions: [...permissions], ...claims }),
    async close() {
      await running.close()
      await store.close()
      rmSync(dataDir, { recursive: true, force: true })
    },
  }
}
