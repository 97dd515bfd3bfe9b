/**
 * The real server for the attack, identity-provider and fuzz suites: `startTokengate` on a
 * fresh data directory, HTTPS on 127.0.0.1:0 with the dev certificate (trusted through `ca`,
 * never by disabling verification), a clock the test can move forward, and the operator CLI
 * in-process against the same data directory.
 *
 * - `request(path, rawHeaders)` sends a flat `[name, value, ...]` header list as given (so
 *   duplicates can be sent) over a keep-alive agent.
 * - `raw(bytes)` writes bytes on a fresh TLS socket and reads the answer: for what Node's
 *   HTTP client refuses to send (CR/LF in values, bare LF, obs-fold).
 * - `clock.advance(ms)` moves tokengate's time (JWKS ages, cooldowns, token expiry) without
 *   waiting; it otherwise follows the wall clock.
 *
 * Rate limiting is switched off where the configuration has it: these suites send thousands
 * of failing requests from one address on purpose, and the limiter has its own tests.
 */
import { Buffer } from 'node:buffer'
import { mkdtempSync, readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import tls from 'node:tls'
import { run } from '../../src/cli/main.ts'
import { loadConfig } from '../../src/config/load.ts'
import { ConfigSchema } from '../../src/config/schema.ts'
import type { Clock } from '../../src/core/ports.ts'
import { type RunningTokengate, startTokengate } from '../../src/main.ts'

export interface GateResponse {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  /** Every response header as sent, `[name, value, ...]`. */
  readonly rawHeaders: readonly string[]
  readonly text: string
  readonly json: Record<string, unknown>
}

/** A clock at wall-clock time plus an offset the test controls. */
export interface MovableClock extends Clock {
  advance(ms: number): void
}

export interface Gate {
  readonly url: string
  readonly port: number
  readonly dataDir: string
  /** PEM of the dev certificate, for clients that verify it. */
  readonly ca: string
  readonly clock: MovableClock
  readonly running: RunningTokengate
  readonly logs: string[]
  request(path: string, headers?: readonly string[], method?: string): Promise<GateResponse>
  raw(bytes: string | Buffer, timeoutMs?: number): Promise<RawResponse>
  cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }>
  close(): Promise<void>
}

export interface RawResponse {
  /** The status code of the first response, or undefined when the server sent none. */
  readonly status: number | undefined
  /** Everything the server sent before closing (or until the timeout). */
  readonly text: string
}

export function createMovableClock(): MovableClock {
  let offset = 0
  return {
    now: () => Date.now() + offset,
    advance(ms) {
      offset += ms
    },
  }
}

const hasRateLimit = Object.hasOwn(
  (ConfigSchema as unknown as { properties: Record<string, unknown> }).properties,
  'rateLimit',
)

/** Starts tokengate in dev mode with `overrides` merged into its configuration. */
export async function startGate(overrides: Record<string, unknown> = {}): Promise<Gate> {
  const dataDir = mkdtempSync(join(tmpdir(), 'tg-attack-'))
  const logs: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...String(chunk).split('\n').filter(Boolean))
      done()
    },
  })
  const config = loadConfig({
    env: {},
    overrides: {
      dev: true,
      dataDir,
      server: { port: 0 },
      log: { level: 'info' },
      ...(hasRateLimit ? { rateLimit: { enabled: false } } : {}),
      ...overrides,
    },
  })
  const clock = createMovableClock()
  const running = await startTokengate(config, { logDestination: sink, clock })
  const ca = readFileSync(join(dataDir, 'tls', 'dev-cert.pem'), 'utf8')
  const url = new URL(running.url)
  const port = Number(url.port)
  const agent = new https.Agent({ ca, keepAlive: true, maxSockets: 64 })

  function request(path: string, headers: readonly string[] = [], method = 'GET') {
    return new Promise<GateResponse>((resolve, reject) => {
      const req = https.request(
        `${running.url}${path}`,
        {
          method,
          agent,
          // A raw header list is sent as given, so Node adds no Host header of its own.
          headers: ['Host', url.host, ...headers] as unknown as Record<string, string>,
        },
        (res) => {
          const chunks: Buffer[] = []
          res.on('data', (chunk: Buffer) => chunks.push(chunk))
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8')
            let json: Record<string, unknown> = {}
            try {
              json = JSON.parse(text)
            } catch {}
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              rawHeaders: res.rawHeaders,
              text,
              json,
            })
          })
        },
      )
      req.setTimeout(15_000, () => req.destroy(new Error('request timed out')))
      req.on('error', reject)
      req.end()
    })
  }

  function raw(bytes: string | Buffer, timeoutMs = 5000) {
    return new Promise<RawResponse>((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () => {
        socket.write(bytes)
      })
      const chunks: Buffer[] = []
      const finish = () => {
        clearTimeout(timer)
        const text = Buffer.concat(chunks).toString('latin1')
        const match = /^HTTP\/1\.1 (\d{3})/.exec(text)
        resolve({ status: match ? Number(match[1]) : undefined, text })
      }
      const timer = setTimeout(() => {
        socket.destroy()
        finish()
      }, timeoutMs)
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk)
        // One complete response is enough: stop once its body has arrived.
        const text = Buffer.concat(chunks).toString('latin1')
        const end = text.indexOf('\r\n\r\n')
        const length = /\r\ncontent-length: (\d+)/i.exec(text)
        if (end >= 0 && length && text.length >= end + 4 + Number(length[1])) {
          socket.destroy()
          finish()
        }
      })
      socket.on('end', finish)
      socket.on('close', finish)
      socket.on('error', (error) => {
        if (chunks.length > 0) finish()
        else reject(error)
      })
    })
  }

  async function cli(...args: string[]) {
    let stdout = ''
    let stderr = ''
    const code = await run([...args, '--data-dir', dataDir], {
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: (s: string) => (stderr += s) },
      env: {},
    })
    return { code, stdout, stderr }
  }

  return {
    url: running.url,
    port,
    dataDir,
    ca,
    clock,
    running,
    logs,
    request,
    raw,
    cli,
    async close() {
      agent.destroy()
      await running.close()
    },
  }
}

/** `Authorization: Bearer <token>` as a raw header pair. */
export const bearer = (token: string) => ['Authorization', `Bearer ${token}`]
/** `X-Tenant-Id: <id>` as a raw header pair. */
export const tenantHeader = (id: string) => ['X-Tenant-Id', id]

/** Polls `check` every 50 ms until it returns true, for at most `timeoutMs`. */
export async function eventually(
  check: () => Promise<boolean>,
  timeoutMs = 5000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await check()) return
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/**
 * Fails when any of `secrets` (or a 12+ character slice of one's signature or payload)
 * appears in a response's body or headers.
 */
export function assertNoEcho(
  response: { text: string; rawHeaders: readonly string[] },
  secrets: readonly string[],
): void {
  const haystack = `${response.rawHeaders.join('\n')}\n${response.text}`
  for (const secret of secrets) {
    for (const needle of echoNeedles(secret)) {
      if (haystack.includes(needle)) {
        throw new Error(
          `a token (or part of one) was echoed in the response: ${needle.slice(0, 12)}…`,
        )
      }
    }
  }
}

function echoNeedles(secret: string): string[] {
  if (secret.length < 16) return [secret]
  const parts = secret.split('.').filter((part) => part.length >= 12)
  return [secret, ...parts]
}

export type KeyHostMode = 'ok' | 'error' | 'hang'

/** A local identity provider's key endpoint: `/jwks.json`, with failure modes and a delay. */
export interface KeyHost {
  readonly url: string
  /** JWKS requests received so far. */
  readonly requests: number
  setJwks(jwks: unknown): void
  /** `ok` serves the JWKS, `error` answers 500, `hang` never answers. */
  setMode(mode: KeyHostMode): void
  /** Delay before each answer, in milliseconds. */
  setDelay(ms: number): void
  close(): Promise<void>
}

/** Starts a JWKS endpoint on 127.0.0.1 with a random port. */
export async function startKeyHost(jwks: unknown): Promise<KeyHost> {
  let body = JSON.stringify(jwks)
  let mode: KeyHostMode = 'ok'
  let delayMs = 0
  let requests = 0
  const server = createServer((_request, response) => {
    requests++
    if (mode === 'hang') return
    const answer = mode
    setTimeout(() => {
      if (answer === 'error') response.writeHead(500).end()
      else response.writeHead(200, { 'content-type': 'application/jwk-set+json' }).end(body)
    }, delayMs)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}/jwks.json`,
    get requests() {
      return requests
    },
    setJwks(next) {
      body = JSON.stringify(next)
    },
    setMode(next) {
      mode = next
    },
    setDelay(ms) {
      delayMs = ms
    },
    async close() {
      const done = new Promise<void>((resolve) => server.close(() => resolve()))
      server.closeAllConnections()
      await done
    },
  }
}
