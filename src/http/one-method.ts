import type { AuthFailure } from '../core/failure.ts'

/** RFC 6750 §2.2 and §2.3: the form field and the query parameter that carry a token. */
const ACCESS_TOKEN = 'access_token'

/**
 * The refusal of a request that sent its token by more than one method (400
 * `invalid_request`). RFC 6750 §2: "Clients MUST NOT use more than one method to transmit
 * the token in each request", and §3.1 names `invalid_request` for it. Why refuse rather
 * than use the header: an intermediary that reads the other copy (a cache key, a log, an
 * upstream that accepts query tokens) would act on a credential tokengate never checked.
 */
export const ONE_METHOD_FAILURE: AuthFailure = Object.freeze({
  code: 'invalid_request',
  detail:
    'Send the access token in exactly one way: the Authorization header, not also as access_token.',
})

/**
 * Whether a request target's query carries `access_token` (any value, also percent-encoded
 * in the name). Cheap for the common case: the query is parsed only when it could match.
 */
export function queryHasAccessToken(url: string): boolean {
  const q = url.indexOf('?')
  if (q === -1) return false
  const query = url.slice(q + 1)
  if (!/access|%/i.test(query)) return false
  return new URLSearchParams(query).has(ACCESS_TOKEN)
}

/** Whether an `application/x-www-form-urlencoded` body carries an `access_token` field. */
export function formHasAccessToken(body: string): boolean {
  return new URLSearchParams(body).has(ACCESS_TOKEN)
}
