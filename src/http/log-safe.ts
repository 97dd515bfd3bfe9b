import { pathOf } from './api-path.ts'

/**
 * Token-shaped text: a PAT (`pat_…`) or a JWT-shaped `eyJ….…[.…]`. Matched anywhere, because a caller can put a token in
 * any path segment or query value, and a log line or audit row must never carry one (SPEC
 * §5.5: "never log a full token").
 */
const TOKEN_SHAPED = /pat_[A-Za-z0-9_-]*|eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*)?/gi
/** A percent-encoded character of the token alphabet (letters, digits, `_`, `-`, `.`). */
const ENCODED_TOKEN_CHAR = /%(?:[46][1-9A-F]|[57][0-9A]|3[0-9]|5F|2D|2E)/gi

/** Longest request path kept in a log line or an audit event. */
export const MAX_LOGGED_PATH = 512
export const TRUNCATED = '…[truncated]'

/**
 * `text` with every token-shaped run replaced by `[redacted]`. Percent-encoded characters of
 * the token alphabet are decoded first, so `%70at_…` is caught too; other escapes stay.
 */
export function redactTokens(text: string): string {
  const plain = text.includes('%')
    ? text.replace(ENCODED_TOKEN_CHAR, (encoded) =>
        String.fromCharCode(Number.parseInt(encoded.slice(1), 16)),
      )
    : text
  return plain.replace(TOKEN_SHAPED, '[redacted]')
}

/** True when `text` holds something token-shaped. */
export function looksLikeToken(text: string): boolean {
  return redactTokens(text) !== text
}

/**
 * A request target as logs and audit events store it: the path without its query (query
 * values are where `access_token=` lives), tokens redacted, at most `MAX_LOGGED_PATH`
 * characters plus a marker, so one request cannot make one row kilobytes long.
 */
export function loggablePath(url: string): string {
  const path = redactTokens(pathOf(url))
  return path.length > MAX_LOGGED_PATH ? path.slice(0, MAX_LOGGED_PATH) + TRUNCATED : path
}
