import type { AuthFailure } from './failure.ts'

/** The only accepted scheme spelling, followed by exactly one space (SPEC §5.3 rule 6). */
const BEARER_PREFIX = 'Bearer '

/**
 * RFC 6750 §2.1 `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
 *
 * Why so strict: SPEC §5.3 rule 6 demands exactly `Authorization: Bearer <token>`. Anything
 * looser (trimming, case-folding the scheme, tolerating tabs) would make two parsers in a
 * chain (proxy, gateway, upstream) disagree about what the token is, which is how request
 * smuggling and credential confusion start. The pattern is anchored and linear-time.
 */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/

/**
 * Upper bound on the token length, in characters. Node already caps all headers at 16 KiB by
 * default; the core repeats the bound so frameworks with larger limits cannot feed it
 * megabytes. Generous enough for large JWTs with many claims.
 */
export const MAX_TOKEN_LENGTH = 16_384

export type ParsedAuthorization =
  | { readonly ok: true; readonly token: string }
  | { readonly ok: false; readonly failure: AuthFailure }

/**
 * Client-safe explanations. Fixed strings on purpose: a parse failure must never echo any
 * part of the header, because the header is (or contains) a credential.
 */
const DETAIL = {
  multiple: 'Send exactly one Authorization header.',
  scheme: 'The Authorization header must use the Bearer scheme: "Bearer <token>".',
  schemeCase: 'The scheme must be spelled exactly "Bearer" (capital B, then lowercase).',
  empty: 'The Bearer token is empty.',
  separator: 'Exactly one space must separate "Bearer" and the token.',
  tooLong: 'The Bearer token is too long.',
  characters:
    'The token contains characters that are not allowed (RFC 6750 b64token: letters, digits, ' +
    '"-", ".", "_", "~", "+", "/", then optional "=" padding); check for whitespace or line breaks.',
} as const

/**
 * Parses the `Authorization` header values of one request into a bearer token
 * (DESIGN "Authentication, precisely" rules 1–2).
 *
 * @param values Every `Authorization` header value, in arrival order (see `readAuthHeaders`).
 * @returns The token, or `missing_authorization` (no header) / `malformed_authorization`
 *   (anything other than exactly one `Bearer` + one space + a b64token). The failure's
 *   `detail` never contains any part of the header.
 *
 * @example
 * parseAuthorization(['Bearer pat_abc']) // { ok: true, token: 'pat_abc' }
 * parseAuthorization(['bearer pat_abc']) // { ok: false, failure: { code: 'malformed_authorization', ... } }
 */
export function parseAuthorization(values: readonly string[]): ParsedAuthorization {
  if (values.length === 0) return { ok: false, failure: { code: 'missing_authorization' } }
  // Two Authorization headers: which one would an upstream or a proxy use? Refusing both is
  // the only answer that cannot be exploited.
  if (values.length > 1) return malformed(DETAIL.multiple)
  const value = values[0] as string
  if (!value.startsWith(BEARER_PREFIX)) return malformed(explainBadScheme(value))
  const token = value.slice(BEARER_PREFIX.length)
  if (token.length === 0) return malformed(DETAIL.empty)
  if (token.length > MAX_TOKEN_LENGTH) return malformed(DETAIL.tooLong)
  if (!B64TOKEN.test(token)) {
    return malformed(isWhitespace(token.charCodeAt(0)) ? DETAIL.separator : DETAIL.characters)
  }
  return { ok: true, token }
}

function explainBadScheme(value: string): string {
  const scheme = value.slice(0, 6)
  if (scheme === 'Bearer') return value.length === 6 ? DETAIL.empty : DETAIL.separator
  if (scheme.toLowerCase() === 'bearer') return DETAIL.schemeCase
  return DETAIL.scheme
}

function isWhitespace(charCode: number): boolean {
  return charCode === 0x20 || charCode === 0x09 || charCode === 0x0a || charCode === 0x0d
}

function malformed(detail: string): ParsedAuthorization {
  return { ok: false, failure: { code: 'malformed_authorization', detail } }
}
