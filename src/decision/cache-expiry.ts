/**
 * How long a proxy may keep a decision (docs/forward-auth.md "Caching decisions"), stated in
 * `X-Accel-Expires`, which nginx's proxy_cache (and ingress-nginx's auth cache) obeys over its
 * own `proxy_cache_valid`: `@<epoch second>` for an allow it may keep, `0` for any other answer.
 *
 * Why an expiry and not a version in the key: nginx must know the key before it looks the
 * entry up, from request-time variables only, and holds nothing tokengate could bump. So the
 * bound lives in the expiry: an allow is kept at most until one second after this instance
 * last read the change log. A PAT's revocation, disabling or edit, or a tenant or stored
 * policy change committed after that read is then refused by the proxy within 1 s of its
 * commit: the entry ends by then, and the decision that replaces it either has read the change
 * or is kept only until one second after its own, older, read. nginx keeps an entry while its
 * clock's second is <= the stated one, so `@S` with S = floor((readAsOf - margin) / 1000) ends
 * it by readAsOf - margin + 1 s. The bound counts from the commit, not from the time the
 * change log records (stamped inside the transaction, before the commit and its fsync):
 * readAsOf is taken before the read's first query, so what a read missed committed after it.
 * The margin is slack on top (for instance against the two hosts' clocks drifting apart).
 *
 * This holds for what a read applies before it completes (a PAT's and a tenant's cached
 * lookups are dropped then), not for what is applied after it, asynchronously: a stored policy,
 * an issuer or a JWT revocation rule is read into memory after the read that names it. While
 * any such read is queued or running, or failed, no answer is kept (`settled`): the decisions
 * made meanwhile are made without the change, and the entries made before it were bound to an
 * older read.
 *
 * Never kept either: an answer carrying an identity token (each request gets its own `jti`),
 * a key with its own rate limit or quota (each use must be counted), a credential of another
 * kind (the proxy's key covers `Authorization` only), an answer decided with a client
 * certificate (RFC 8705 binding: the key holds no certificate), any answer while the change
 * log cannot be read.
 */
import type { Answer } from './decide.ts'

export const CACHE_EXPIRY_HEADER = 'x-accel-expires'

/** Subtracted from the last read's time: see the file comment. */
export const APPLY_MARGIN_MS = 50

/** The built-in kinds, the only ones decided from `Authorization` alone. */
const KEYED_ON_AUTHORIZATION = new Set(['pat', 'jwt'])

/** At most one extra change-log read per this many ms (the poll reads every 500 ms). */
const NUDGE_EVERY_MS = 25

export interface ChangeFreshness {
  /** Epoch ms up to which every change has been applied (store `changesReadAsOf`). */
  readonly readAsOf: () => number | undefined
  /** Reads the change log now: an allow is kept again once its read is this second's. */
  readonly catchUp?: (() => void) | undefined
  /** False while a change the log delivered is still being applied (policy, issuer, JWT rule). */
  readonly settled?: (() => boolean) | undefined
}

/** Returns the `X-Accel-Expires` value for an answer. */
export function createCacheExpiry(
  changes: ChangeFreshness,
  now: () => number = Date.now,
): (answer: Answer) => string {
  let nudgedAt = Number.NEGATIVE_INFINITY
  return (answer) => {
    if (answer.type !== 'allow') return '0'
    // A certificate-bound token's allow holds only with its certificate, not in the key.
    if (answer.withCertificate === true) return '0'
    const { principal, identity } = answer.outcome
    if (identity?.['x-auth-token'] !== undefined || principal.limits !== undefined) return '0'
    if (!KEYED_ON_AUTHORIZATION.has(principal.tokenType)) return '0'
    if (changes.settled && !changes.settled()) return '0'
    const readAsOf = changes.readAsOf()
    if (readAsOf === undefined) return '0'
    const at = now()
    const second = Math.floor(at / 1000)
    let last = Math.floor((readAsOf - APPLY_MARGIN_MS) / 1000)
    // A read made now would make this second's allows keepable: ask for one.
    const helps = at - second * 1000 >= APPLY_MARGIN_MS
    if (last < second && helps && changes.catchUp && at - nudgedAt >= NUDGE_EVERY_MS) {
      nudgedAt = at
      changes.catchUp()
    }
    // Never past the credential's own expiry.
    if (principal.expiresAt !== null) {
      last = Math.min(last, Math.floor(principal.expiresAt / 1000) - 1)
    }
    return last >= second ? `@${last}` : '0'
  }
}
