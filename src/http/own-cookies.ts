/**
 * tokengate's own cookies and the rule that keeps them away from upstreams: the admin
 * console's session cookie is an operator credential, and its pending sign-in cookie holds
 * the state, nonce and PKCE verifier of a sign-in under way; a browser sends both with every
 * request to the host they were set for, whatever the port, so an API sharing the console's
 * hostname would receive them. The gateway removes them; the decision API refuses or removes
 * them where a proxy cannot (docs/forward-auth.md).
 */

/** The admin console's session cookie (`__Host-`: Secure, Path=/, no Domain). */
export const ADMIN_SESSION_COOKIE = '__Host-tokengate-admin'

/** The console's pending sign-in by redirect (`__Host-`, 10 minutes). */
export const SIGN_IN_COOKIE = '__Host-tokengate-sso'

const OWN: readonly string[] = [ADMIN_SESSION_COOKIE, SIGN_IN_COOKIE].map((name) =>
  name.toLowerCase(),
)
/** What every own cookie's name starts with: the cheap test for the usual, cookie-free case. */
const OWN_PREFIX = '__host-tokengate-'

/** The own cookie a `name=value` pair is (names compared case-insensitively), if any. */
function ownName(pair: string): string | undefined {
  const eq = pair.indexOf('=')
  const name = (eq === -1 ? pair : pair.slice(0, eq)).trim().toLowerCase()
  return OWN.includes(name) ? name : undefined
}

/**
 * How often the most repeated of tokengate's cookies appears in a `Cookie` value: 0 for
 * none, 1 for a browser's usual one of each, more when one was sent twice.
 */
export function countOwnCookies(cookie: string): number {
  if (!cookie.toLowerCase().includes(OWN_PREFIX)) return 0
  const counts = new Map<string, number>()
  for (const pair of cookie.split(';')) {
    const name = ownName(pair)
    if (name !== undefined) counts.set(name, (counts.get(name) ?? 0) + 1)
  }
  return Math.max(0, ...counts.values())
}

/**
 * The `Cookie` value without tokengate's cookies, the others unchanged and in order;
 * undefined when none is left. The value itself when it holds none (the usual case).
 */
export function withoutOwnCookies(cookie: string): string | undefined {
  if (!cookie.toLowerCase().includes(OWN_PREFIX)) return cookie
  const kept = cookie
    .split(';')
    .map((pair) => pair.trim())
    .filter((pair) => pair !== '' && ownName(pair) === undefined)
  return kept.length === 0 ? undefined : kept.join('; ')
}
