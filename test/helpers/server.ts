/**
 * The real server for end-to-end tests: `startTestServer()` starts tokengate on a fresh
 * data directory, HTTPS on 127.0.0.1:0 with the dev certificate (trusted through `ca`, never
 * by disabling verification), a clock the test can move forward, and the operator CLI
 * against the same data directory. From the sources (the default) both run in-process; with
 * the installed package under test (helpers/launch.ts) they are `tokengate serve` and
 * `tokengate ...` processes, and the clock cannot be moved.
 *
 * - `request(path, rawHeaders)` sends a flat `[name, value, ...]` header list as given (so
 *   duplicates can be sent); keep-alive when `options.keepAlive` is set.
 * - `raw(bytes)` writes bytes on a fresh TLS socket and reads the answer: for what Node's
 *   HTTP client refuses to send (CR/LF in values, bare LF, obs-fold).
 * - `clock.advance(ms)` moves tokengate's time (JWKS ages, cooldowns, token expiry) without
 *   waiting; it otherwise follows the wall clock.
 * - Every log line is captured in `logs`.
 */
import { Buffer } from 'node:buffer'
import { readFileSync } from 'node:fs'
import https from 'node:https'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import tls from 'node:tls'
import { run } from '../../src/cli/main.ts'
import { type TestClock, testClock } from './clock.ts'
import { type Launched, launchTokengate, PACKAGE_PROJECT, runTokengate } from './launch.ts'
import { tempDir } from './temp-dir.ts'

export interface TestResponse {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  /** Every response header as sent, `[name, value, ...]`. */
  readonly rawHeaders: readonly string[]
  readonly text: string
  readonly json: Record<string, unknown>
}

/** A clock at wall-clock time plus an offset the test controls. */
export type MovableClock = TestClock

export interface TestServer {
  readonly url: string
  readonly port: number
  readonly dataDir: string
  /** PEM of the dev certificate, for clients that verify it. */
  readonly ca: string
  /** Moves tokengate's time; only in-process (`needsSources`), a process runs on wall time. */
  readonly clock: MovableClock
  readonly running: Launched
  readonly logs: string[]
  request(path: string, headers?: readonly string[], method?: string): Promise<TestResponse>
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
  return testClock('wall')
}

/**
 * Starts tokengate in dev mode, with its production defaults (rate limiting included) and
 * `overrides` merged into its configuration.
 */
export async function startTestServer(
  overrides: Record<string, unknown> = {},
  options: { readonly keepAlive?: boolean } = {},
): Promise<TestServer> {
  // A test may start the server on a data directory it prepared (e.g. rows put in first).
  const dataDir = typeof overrides.dataDir === 'string' ? overrides.dataDir : tempDir('tg-e2e-')
  const logs: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...String(chunk).split('\n').filter(Boolean))
      done()
    },
  })
  const clock = createMovableClock()
  const running = await launchTokengate(
    { dev: true, dataDir, server: { port: 0 }, log: { level: 'info' }, ...overrides },
    { logDestination: sink, clock },
  )
  const ca = readFileSync(join(dataDir, 'tls', 'dev-cert.pem'), 'utf8')
  const url = new URL(running.url)
  const port = Number(url.port)
  // Keep-alive only when asked (the fuzz run): a test that makes the server close a
  // connection (431, shutdown) must not have its next request sent on that dead socket.
  const agent = new https.Agent({ ca, keepAlive: options.keepAlive ?? false, maxSockets: 64 })

  function request(path: string, headers: readonly string[] = [], method = 'GET') {
    return new Promise<TestResponse>((resolve, reject) => {
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
    if (PACKAGE_PROJECT) return runTokengate([...args, '--data-dir', dataDir])
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
