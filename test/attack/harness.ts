/**
 * Helpers for the attack, identity-provider and fuzz suites: the shared end-to-end server
 * (test/helpers/server.ts) with rate limiting off, raw header builders, polling, an echo
 * check (the local JWKS endpoint is test/helpers/jwt.ts startKeyServer).
 */
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
