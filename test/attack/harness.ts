/**
 * Helpers for the attack, identity-provider and fuzz suites: the shared end-to-end server
 * (test/helpers/server.ts) with rate limiting off, raw header builders, polling, an echo
 * check, and a local JWKS endpoint with failure modes.
 */
import { createServer } from 'node:http'
import {
  createMovableClock,
  type MovableClock,
  type RawResponse,
  startTestServer,
  type TestResponse,
  type TestServer,
} from '../helpers/server.ts'

export { createMovableClock, type MovableClock, type RawResponse }
export type GateResponse = TestResponse
export type Gate = TestServer

/**
 * Starts tokengate for these suites: the shared end-to-end server with rate limiting off
 * (they send thousands of failing requests from one address on purpose; the limiter has its
 * own tests), and `overrides` merged into its configuration.
 */
export function startGate(overrides: Record<string, unknown> = {}): Promise<Gate> {
  return startTestServer({ rateLimit: { enabled: false }, ...overrides }, { keepAlive: true })
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
