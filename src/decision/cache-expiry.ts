/**
 * How long a proxy may keep a decision (docs/forward-auth.md "Caching decisions"), stated
 * twice on an allow it may keep: in `X-Accel-Expires`, which nginx's proxy_cache (and
 * ingress-nginx's auth cache) obeys over its own `proxy_cache_valid`, as `@<epoch second>`
 * (`0` on any other answer); and, to a proxy that asks for it (`X-Tokengate-Keep: ms`, the Lua
 * example, which reads the answer itself and keeps to the millisecond), in
 * `X-Tokengate-Keep-Ms`, the milliseconds from now. Only when asked: every other answer stays
 * as it was, byte for byte, and pays nothing for it.
 *
 * Why an expiry and not a version in the key: nginx must know the key before it looks the
 * entry up, from request-time variables only, and holds nothing tokengate could bump. So the
 * bound lives in the expiry: an allow is kept at most until one second after this instance
 * last read the change log. A PAT's revocation, disabling or edit, or a tenant or stored
 * policy change committed after that read is then refused by the proxy within 1 s of its
 * commit: the entry ends by then, and the decision that replaces it either has read the change
 * or is kept only until one second after its own, older, read. nginx keeps an entry while its
 * clock's second is <= the stated one, so `@S` with S = floor((readAsOf - margin) / 1000) ends
 * it by readAsOf - margin + 1 s; `X-Tokengate-Keep-Ms` states that instant itself, relative
 * to now, so no two clocks need agree. The bound counts from the commit, not from the time the
 * change log records (stamped inside the transaction, before the commit and its fsync):
 * readAsOf is taken before the read's first query, so what a read missed committed after it.
 * The margin is slack on top: against the two hosts' clocks drifting apart for the absolute
 * second; for the relative ms, against a proxy that counts them from when the answer reached
 * it rather than from when it asked (the Lua example counts from its ask).
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
/** Milliseconds from now the answer may be kept, on the answers `@` may be stated for. */
export const KEEP_MS_HEADER = 'x-tokengate-keep-ms'
/** A request header: `ms` asks for `X-Tokengate-Keep-Ms` on an answer that may be kept. */
export const KEEP_ASK_HEADER = 'x-tokengate-keep'

/** What an answer may be kept for, in both forms. */
export interface KeepTime {
  /** `X-Accel-Expires`: `@<epoch second>` (kept while the proxy's second is <= it), or `0`. */
  readonly accelExpires: string
  /** `X-Tokengate-Keep-Ms` (>= 1), or 0: the answer may not be kept at all. */
  readonly keepMs: number
}

const NOT_KEPT: KeepTime = Object.freeze({ accelExpires: '0', keepMs: 0 })

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

/**
 * Returns what an answer may be kept for. A stated second always comes with its ms, which end
 * no earlier (at readAsOf - margin + 1 s, not at the start of that second); the ms come alone
 * in the part of a second before a read of it, where proxy_cache can keep nothing.
 */
export function createCacheExpiry(
  changes: ChangeFreshness,
  now: () => number = Date.now,
): (answer: Answer) => KeepTime {
  let nudgedAt = Number.NEGATIVE_INFINITY
  return (answer) => {
    if (answer.type !== 'allow') return NOT_KEPT
    // A certificate-bound token's allow holds only with its certificate, not in the key.
    if (answer.withCertificate === true) return NOT_KEPT
    const { principal, identity } = answer.outcome
    if (identity?.['x-auth-token'] !== undefined || principal.limits !== undefined) return NOT_KEPT
    if (!KEYED_ON_AUTHORIZATION.has(principal.tokenType)) return NOT_KEPT
    if (changes.settled && !changes.settled()) return NOT_KEPT
    const readAsOf = changes.readAsOf()
    if (readAsOf === undefined) return NOT_KEPT
    const at = now()
    const second = Math.floor(at / 1000)
    let last = Math.floor((readAsOf - APPLY_MARGIN_MS) / 1000)
    let until = readAsOf - APPLY_MARGIN_MS + 1000
    // A read made now would make this second's allows keepable: ask for one.
    const helps = at - second * 1000 >= APPLY_MARGIN_MS
    if (last < second && helps && changes.catchUp && at - nudgedAt >= NUDGE_EVERY_MS) {
      nudgedAt = at
      changes.catchUp()
    }
    // Never past the credential's own expiry.
    if (principal.expiresAt !== null) {
      last = Math.min(last, Math.floor(principal.expiresAt / 1000) - 1)
      until = Math.min(until, principal.expiresAt)
    }
    const keepMs = Math.floor(until - at)
    if (keepMs < 1) return NOT_KEPT
    return { accelExpires: last >= second ? `@${last}` : '0', keepMs }
  }
}
