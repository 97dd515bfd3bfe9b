import { hash } from 'node:crypto'

/**
 * Digests of `Authorization` values that authenticated recently on this instance, bounded
 * in count and age (least recently used dropped first): the token's SHA-256 for `Bearer <token>`
 * (shared with authentication, see server/token-digest.ts), `credentialDigest` for anything else.
 *
 * Why it exists: once an address is over its failed-authentication limit, its unverified
 * attempts are refused before any signature check or store lookup. A legitimate caller
 * behind the same address (a shared NAT, a proxy) is told apart by presenting a credential
 * this instance has already verified; that request still goes through full authentication
 * (revocation, expiry, tenant), so this set only decides who may *try*, never who is let in.
 *
 * Why digests: a heap dump or debugger must not reveal usable tokens. A SHA-256 of a
 * high-entropy secret cannot be reversed, and a collision would only buy an attacker one
 * ordinary verification attempt.
 */
export class KnownCredentials {
  readonly #maxEntries: number
  readonly #maxAgeMs: number
  readonly #refreshMs: number
  readonly #seen = new Map<string, number>()

  constructor(maxEntries: number, maxAgeMs: number) {
    this.#maxEntries = maxEntries
    this.#maxAgeMs = maxAgeMs
    this.#refreshMs = maxAgeMs / 64
  }

  /**
   * Records the digest of a header value whose credential authenticated just now. A digest
   * refreshed within the last 1/64 of the maximum age keeps its place: the recency order is
   * then approximate by under a minute, and the busiest tokens skip two Map writes a request.
   */
  remember(digest: string, now: number): void {
    const at = this.#seen.get(digest)
    if (at !== undefined && now - at < this.#refreshMs) return
    this.#seen.delete(digest)
    this.#seen.set(digest, now)
    if (this.#seen.size > this.#maxEntries) {
      const oldest = this.#seen.keys().next()
      if (!oldest.done) this.#seen.delete(oldest.value)
    }
  }

  /** Drops the digest of a header value whose credential failed (revoked or expired since). */
  forget(digest: string): void {
    this.#seen.delete(digest)
  }

  /** Whether the header value of this digest authenticated within the maximum age. */
  has(digest: string, now: number): boolean {
    const at = this.#seen.get(digest)
    if (at === undefined) return false
    if (now - at > this.#maxAgeMs) {
      this.#seen.delete(digest)
      return false
    }
    return true
  }
}

/**
 * The digest a header value is remembered by (SHA-256, base64url). One-shot `crypto.hash`:
 * no Hash object per call, measurably cheaper than `createHash().update().digest()`.
 */
export function credentialDigest(value: string): string {
  return hash('sha256', value, 'base64url')
}
