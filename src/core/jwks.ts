/**
 * A remote JSON Web Key Set: fetched on first use, cached for `cacheMaxAgeMs`, refetched at
 * most once per `cooldownMs` (on expiry or on an unknown `kid`), and kept for
 * `staleWhileErrorMs` more while the URL is down.
 *
 * Fail closed, but honestly: when no usable keys can be had, the answer is an `unavailable`
 * failure (503 with `Retry-After`), never a pass and never `invalid_token` (the token may be
 * fine; we cannot tell). Nothing here throws.
 */
import { Buffer } from 'node:buffer'
import type { AuthFailure } from './failure.ts'
import {
  type BoundKey,
  bindJwk,
  type IssuerKeys,
  type KeyLookup,
  selectionFailure,
  selectKey,
} from './jwt-keys.ts'
import type { Clock } from './ports.ts'

/** Remote JWKS timings, all in milliseconds. */
export interface JwksOptions {
  /** Abort a JWKS request after this long. Default 5000. */
  readonly timeoutMs: number
  /** Minimum time between two requests to the same JWKS URL. Default 30000. */
  readonly cooldownMs: number
  /** Refetch keys older than this (on the next token that needs them). Default 600000. */
  readonly cacheMaxAgeMs: number
  /** Keep using keys this long past `cacheMaxAgeMs` while refetching fails. Default 3600000. */
  readonly staleWhileErrorMs: number
}

export const DEFAULT_JWKS_OPTIONS: JwksOptions = Object.freeze({
  timeoutMs: 5000,
  cooldownMs: 30_000,
  cacheMaxAgeMs: 600_000,
  staleWhileErrorMs: 3_600_000,
})

/** A JWKS document larger than this is refused: key sets are a few kilobytes. */
const MAX_JWKS_BYTES = 256 * 1024

export interface RemoteJwksDeps {
  readonly clock: Clock
  readonly fetch: typeof globalThis.fetch
}

/**
 * Checks a JWKS URL: `https:`, or `http:` on a loopback host only.
 *
 * Why: keys fetched over plain HTTP can be replaced by anyone on the path, and whoever
 * supplies the keys can mint any token. Loopback is allowed for local identity providers
 * and tests.
 */
export function checkJwksUrl(url: string): URL {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new Error('JWKS URL is not a valid URL')
  }
  const loopback = ['127.0.0.1', '[::1]', 'localhost'].includes(parsed.hostname)
  if (parsed.protocol !== 'https:' && !(parsed.protocol === 'http:' && loopback)) {
    throw new Error('JWKS URL must use https (http is allowed on loopback only)')
  }
  return parsed
}

/** Creates the key source of one issuer whose keys live at `url`. */
export function createRemoteJwks(
  url: string,
  options: JwksOptions,
  deps: RemoteJwksDeps,
): IssuerKeys {
  const target = checkJwksUrl(url)
  const { clock } = deps
  const closer = new AbortController()
  let keys: readonly BoundKey[] | undefined
  let fetchedAt = Number.NEGATIVE_INFINITY
  let attemptedAt = Number.NEGATIVE_INFINITY
  let inflight: Promise<boolean> | undefined

  const coolingDown = (now: number) => now - attemptedAt < options.cooldownMs

  function unavailable(): KeyLookup {
    const waitMs = Math.max(attemptedAt + options.cooldownMs - clock.now(), 0)
    const failure: AuthFailure = {
      code: 'unavailable',
      dependency: 'jwks',
      retryAfterSeconds: Math.max(1, Math.ceil(waitMs / 1000)),
    }
    return { ok: false, failure }
  }

  async function load(): Promise<boolean> {
    attemptedAt = clock.now()
    try {
      const fetched = await fetchKeySet(target, options.timeoutMs, closer.signal, deps.fetch)
      if (closer.signal.aborted) return false
      keys = fetched
      fetchedAt = clock.now()
      return true
    } catch {
      return false
    }
  }

  /** One request at a time: concurrent callers share the in-flight refresh. */
  function refresh(): Promise<boolean> {
    inflight ??= load().finally(() => {
      inflight = undefined
    })
    return inflight
  }

  return {
    async resolve(alg, kid) {
      if (closer.signal.aborted) return unavailable()
      const now = clock.now()
      if (inflight !== undefined) {
        await inflight
      } else if (
        (keys === undefined || now - fetchedAt >= options.cacheMaxAgeMs) &&
        !coolingDown(now)
      ) {
        await refresh()
      }
      const usableUntil = fetchedAt + options.cacheMaxAgeMs + options.staleWhileErrorMs
      if (keys === undefined || clock.now() >= usableUntil) return unavailable()
      let selection = selectKey(keys, alg, kid)
      // An unknown kid may be a freshly rotated key: look again, at most once per cooldown.
      if (!selection.ok && selection.reason === 'unknown_key' && !coolingDown(clock.now())) {
        if (!(await refresh())) return unavailable()
        selection = selectKey(keys, alg, kid)
      }
      return selection.ok ? selection : { ok: false, failure: selectionFailure(selection.reason) }
    },
    close() {
      closer.abort()
      keys = undefined
    },
  }
}

/**
 * Fetches and binds a key set. Throws on any failure (status, size, JSON, no usable key);
 * the caller keeps its previous keys. Keys that cannot be bound (no `alg` on an RSA key,
 * `oct`, private material, ...) are skipped, not fatal: one odd key must not lock out the
 * others. A set with no usable key at all counts as a failed fetch.
 */
async function fetchKeySet(
  url: URL,
  timeoutMs: number,
  closed: AbortSignal,
  fetchImpl: typeof globalThis.fetch,
): Promise<readonly BoundKey[]> {
  const signal = AbortSignal.any([AbortSignal.timeout(timeoutMs), closed])
  const response = await fetchImpl(url, {
    signal,
    redirect: 'manual',
    headers: { accept: 'application/jwk-set+json, application/json' },
  })
  if (response.status !== 200) {
    await response.body?.cancel()
    throw new Error(`JWKS answered ${response.status}`)
  }
  const document: unknown = JSON.parse(await readCapped(response, MAX_JWKS_BYTES))
  const listed = (document as { keys?: unknown } | null)?.keys
  if (!Array.isArray(listed)) throw new Error('not a JWKS')
  const bound: BoundKey[] = []
  for (const jwk of listed) {
    try {
      bound.push(bindJwk(jwk as Record<string, unknown>))
    } catch {
      // Skipped: see above.
    }
  }
  if (bound.length === 0) throw new Error('JWKS has no usable key')
  return bound
}

async function readCapped(response: Response, maxBytes: number): Promise<string> {
  if (response.body === null) return ''
  const reader = response.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > maxBytes) {
      await reader.cancel()
      throw new Error('JWKS too large')
    }
    chunks.push(value)
  }
  return Buffer.concat(chunks).toString('utf8')
}
