/**
 * The verified-token cache: a repeated JWT costs a hash and a map lookup, not a signature
 * check.
 *
 * Keyed by the SHA-256 of the token, not the token. Why: a cache holds thousands of live
 * bearer tokens for their whole lifetime; a heap snapshot or core dump of the process would
 * hand all of them out. A digest is useless to whoever reads it, and costs about a
 * microsecond per lookup.
 *
 * Only successful verifications are stored. An entry is served only while the token would
 * still pass the uncached time checks (`exp`, `nbf`, future `iat`, with the same clock
 * tolerance); otherwise the caller falls through to full verification, which then rejects
 * the token exactly as it would have without the cache.
 */
import { hash } from 'node:crypto'
import type { VerifiedJwt } from './ports.ts'

/** What a cache entry remembers beyond the verified token. */
export interface CachedJwt {
  readonly jwt: VerifiedJwt
  /** `exp`, in epoch seconds. */
  readonly expSec: number
  /** The latest of `nbf` and `iat` (epoch seconds), or undefined when neither was present. */
  readonly notBeforeSec: number | undefined
}

/** A bounded, least-recently-used map from token digest to verified token. */
export interface JwtCache {
  /** Digest of a token, the cache key. */
  keyOf(token: string): string
  /** The cached token if it is still valid at `nowSec` (epoch seconds) given the tolerance. */
  get(key: string, nowSec: number, toleranceSec: number): VerifiedJwt | undefined
  set(key: string, entry: CachedJwt): void
  readonly size: number
  clear(): void
}

/** Creates a cache holding at most `maxEntries` tokens; 0 disables caching. */
export function createJwtCache(maxEntries: number): JwtCache {
  const entries = new Map<string, CachedJwt>()
  return {
    keyOf: (token) => hash('sha256', token, 'base64url'),
    get(key, nowSec, toleranceSec) {
      const entry = entries.get(key)
      if (entry === undefined) return undefined
      // Same comparisons as jose's uncached checks: expired once exp <= now - tolerance.
      const expired = entry.expSec <= nowSec - toleranceSec
      const early = entry.notBeforeSec !== undefined && entry.notBeforeSec > nowSec + toleranceSec
      if (expired || early) {
        if (expired) entries.delete(key)
        return undefined
      }
      // Refresh recency: Map iteration order is insertion order, so the first key is the LRU.
      entries.delete(key)
      entries.set(key, entry)
      return entry.jwt
    },
    set(key, entry) {
      if (maxEntries <= 0) return
      entries.delete(key)
      entries.set(key, entry)
      while (entries.size > maxEntries) {
        const oldest = entries.keys().next()
        if (oldest.done === true) break
        entries.delete(oldest.value)
      }
    },
    get size() {
      return entries.size
    },
    clear: () => entries.clear(),
  }
}
