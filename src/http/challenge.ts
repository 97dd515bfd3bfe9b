/** The `realm` of every Bearer challenge (RFC 6750 §3). */
export const REALM = 'tokengate'

/** RFC 6750 §3 challenge attributes, beyond `realm`. */
export interface BearerChallenge {
  readonly error?: 'invalid_request' | 'invalid_token' | 'insufficient_scope'
  readonly errorDescription?: string
  /** Space-separated permissions the resource needs (403 only). */
  readonly scope?: string
}

/**
 * Builds a `WWW-Authenticate` value: `Bearer realm="tokengate"` plus the given attributes,
 * every value passed through `quoteString`.
 *
 * @example
 * bearerChallenge({ error: 'invalid_token', errorDescription: 'The access token has expired.' })
 * // 'Bearer realm="tokengate", error="invalid_token", error_description="The access token has expired."'
 */
export function bearerChallenge(challenge: BearerChallenge = {}): string {
  let value = `Bearer realm=${quoteString(REALM)}`
  if (challenge.error !== undefined) value += `, error=${quoteString(challenge.error)}`
  if (challenge.errorDescription !== undefined) {
    value += `, error_description=${quoteString(challenge.errorDescription)}`
  }
  if (challenge.scope !== undefined) value += `, scope=${quoteString(challenge.scope)}`
  return value
}

/**
 * The one quoting helper for header parameters: an RFC 9110 §5.6.4 quoted-string.
 *
 * `"` and `\` are backslash-escaped. Why also replace every character outside printable
 * ASCII with `?`: a CR or LF in a header value is a response-splitting bug (Node would
 * throw), and other control or non-ASCII characters are read differently by different
 * clients. Values placed here are our own fixed texts, so nothing useful is lost.
 */
export function quoteString(value: string): string {
  return `"${value.replace(/[^\x20-\x7e]/g, '?').replace(/["\\]/g, '\\$&')}"`
}

/**
 * The answer's `WWW-Authenticate` challenge under another scheme (a registered credential
 * kind's own, e.g. `ApiKey`): the same attributes after it. Unchanged for `Bearer`.
 */
export function withScheme(
  headers: Readonly<Record<string, string>>,
  scheme: string,
): Readonly<Record<string, string>> {
  const challenge = headers['www-authenticate']
  if (scheme === 'Bearer' || challenge === undefined || !challenge.startsWith('Bearer ')) {
    return headers
  }
  return { ...headers, 'www-authenticate': `${scheme}${challenge.slice('Bearer'.length)}` }
}
