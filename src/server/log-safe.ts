/**
 * Token-shaped text: a PAT (`pat_…`, `_` possibly percent-encoded) or a JWT-shaped
 * `eyJ….….…` (dots possibly encoded). Matched anywhere, because a caller can put a token in
 * any path segment or query value, and a log line or audit row must never carry one (SPEC
 * §5.5: "never log a full token").
 */
const TOKEN_SHAPED =
  /pat(?:_|%5f)[A-Za-z0-9_%-]*|eyJ[A-Za-z0-9_-]*(?:\.|%2e)[A-Za-z0-9_-]*(?:(?:\.|%2e)[A-Za-z0-9_-]*)?/gi

/** Longest request path kept in a log line or an audit event. */
export const MAX_LOGGED_PATH = 512
export const TRUNCATED = '…[truncated]'

/** `text` with every token-shaped run replaced by `[redacted]`. */
export function redactTokens(text: string): string {
  return text.replace(TOKEN_SHAPED, '[redacted]')
}

/** True when `text` holds something token-shaped. */
export function looksLikeToken(text: string): boolean {
  TOKEN_SHAPED.lastIndex = 0
  const found = TOKEN_SHAPED.test(text)
  TOKEN_SHAPED.lastIndex = 0
  return found
}

/**
 * A request target as logs and audit events store it: the path without its query (query
 * values are where `access_token=` lives), tokens redacted, at most `MAX_LOGGED_PATH`
 * characters plus a marker, so one request cannot make one row kilobytes long.
 */
export function loggablePath(url: string): string {
  const q = url.indexOf('?')
  const path = redactTokens(q === -1 ? url : url.slice(0, q))
  return path.length > MAX_LOGGED_PATH ? path.slice(0, MAX_LOGGED_PATH) + TRUNCATED : path
}
