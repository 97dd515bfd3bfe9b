import { randomBytes } from 'node:crypto'
import { looksLikeToken } from './log-safe.ts'

/**
 * What a caller's `X-Request-Id` may be: 1–64 characters of this set, the first a letter or
 * digit (an id is pasted into grep and CLI arguments, where a leading `-` is an option).
 */
const SAFE_REQUEST_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/

/**
 * The request id of a request, the one rule every front end uses: the caller's
 * `X-Request-Id` when it is 1–64 characters of `[A-Za-z0-9._:-]`, starts with a letter or
 * digit and is not token-shaped, otherwise a new id.
 *
 * Why the check: the id is echoed in the response header and the problem body, written to
 * every log line and audit event of the request and forwarded upstream. A caller must not be
 * able to put arbitrary text there, and a token sent there by a misconfigured client (a PAT
 * matches the character set) must never be logged.
 *
 * @example
 * const requestId = requestIdOf(req.headers['x-request-id'], nextRequestId)
 */
export function requestIdOf(
  header: string | readonly string[] | null | undefined,
  generate: () => string = newRequestId,
): string {
  return typeof header === 'string' && SAFE_REQUEST_ID.test(header) && !looksLikeToken(header)
    ? header
    : generate()
}

/**
 * A generator of request ids: a random prefix and a counter, e.g. `kQ2vX9c1TzA-1f3`.
 *
 * Why not `randomUUID()` per request: ids only correlate a response, its log line and its
 * audit event; they grant nothing, so they need to be unique, not secret. 64 random bits
 * per generator make two instances' ids collide with negligible probability, the counter
 * makes them unique within one, and the prefix hides how many processes or restarts there
 * were.
 */
export function createRequestIdGenerator(): () => string {
  // base64url's `-` and `_` become letters: an id never starts with `-`.
  const random = randomBytes(8)
    .toString('base64url')
    .replace(/[-_]/g, (c) => (c === '-' ? 'x' : 'y'))
  const prefix = `${random}-`
  let counter = 0
  return () => prefix + (++counter).toString(36)
}

/** The process's one generator: every listener's ids come from it (auth/edge.ts). */
const newRequestId = createRequestIdGenerator()
