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
 *
 * An entry also remembers the validity of the key that verified it (`KeyValidity`,
 * jwt-keys.ts): a hit once its key source is due to read the key set again starts that read
 * in the background, and once a read no longer publishes the key the entry is not served (the
 * token is verified afresh and refused), so a withdrawn key cuts its cached tokens within the
 * key cache's bounds, not at their `exp`. The cost on a hit is one comparison.
 */
import { hash } from 'node:crypto'
import type { KeyValidity } from './jwt-keys.ts'
import type { VerifiedJwt } from './ports.ts'

/** What a cache entry remembers beyond the verified token. */
export interface CachedJwt {
  readonly jwt: VerifiedJwt
  /** `exp`, in epoch seconds. */
  readonly expSec: number
  /** The latest of `nbf` and `iat` (epoch seconds), or undefined when neither was present. */
  readonly notBeforeSec: number | undefined
  /** The verifying key's validity (remote key sources); absent for static keys. */
  readonly validity?: KeyValidity | undefined
}

/**
 * A bounded, least-recently-used-ish map from token digest to verified token: it keeps
 * between `maxEntries / 2` and `maxEntries` of the most recently used tokens.
 */
export interface JwtCache {
  /** Digest of a token, the cache key. */
  keyOf(token: string): string
  /**
   * The cached token if it is still valid at `nowMs` (epoch ms) given the tolerance (seconds),
   * and its key's validity has not run out.
   */
  get(key: string, nowMs: number, toleranceSec: number): VerifiedJwt | undefined
  set(key: string, entry: CachedJwt): void
  readonly size: number
  clear(): void
}

/**
 * Creates a cache holding at most `maxEntries` tokens; 0 disables caching.
 *
 * Two generations (as hashlru does) rather than a Map refreshed by delete-and-set on every
 * hit: V8 compacts a Map's deleted slots by rehashing it, so a hit on a 10 000-entry Map
 * costs tens of microseconds that way. Here a hit in the young generation is one `get`; a
 * hit in the old one promotes the entry; when the young generation is full it becomes the
 * old one and the previous old one is dropped whole.
 */
export function createJwtCache(maxEntries: number): JwtCache {
  const generationSize = Math.max(1, Math.ceil(maxEntries / 2))
  let young = new Map<string, CachedJwt>()
  let old = new Map<string, CachedJwt>()

  function remember(key: string, entry: CachedJwt) {
    young.set(key, entry)
    if (young.size >= generationSize) {
      old = young
      young = new Map()
    }
  }

  return {
    // Lowercase hex, as the server's per-request token digest (AuthInput.tokenSha256).
    keyOf: (token) => hash('sha256', token, 'hex'),
    get(key, nowMs, toleranceSec) {
      let entry = young.get(key)
      const promote = entry === undefined
      if (promote) entry = old.get(key)
      if (entry === undefined) return undefined
      const validity = entry.validity
      if (validity !== undefined && nowMs >= validity.recheckAtMs) {
        // Kept, not deleted: a fresh verification replaces it, a refusal leaves it unserved.
        if (nowMs >= validity.validUntilMs) return undefined
        validity.recheck()
      }
      const nowSec = Math.floor(nowMs / 1000)
      // Same comparisons as jose's uncached checks: expired once exp <= now - tolerance.
      if (entry.expSec <= nowSec - toleranceSec) {
        young.delete(key)
        old.delete(key)
        return undefined
      }
      if (entry.notBeforeSec !== undefined && entry.notBeforeSec > nowSec + toleranceSec) {
        return undefined
      }
      if (promote) {
        old.delete(key)
        remember(key, entry)
      }
      return entry.jwt
    },
    set(key, entry) {
      if (maxEntries <= 0) return
      old.delete(key)
      remember(key, entry)
    },
    get size() {
      return young.size + old.size
    },
    clear() {
      young = new Map()
      old = new Map()
    },
  }
}
