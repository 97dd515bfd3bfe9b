/**
 * tokengate's own cookies and the rule that keeps them away from upstreams: the admin
 * console's session cookie is an operator credential, and a browser sends it with every
 * request to the host it was set for, whatever the port, so an API sharing the console's
 * hostname would receive it. The gateway removes it; the decision API refuses or removes it
 * where a proxy cannot (docs/forward-auth.md).
 */

/** The admin console's session cookie (`__Host-`: Secure, Path=/, no Domain). */
export const ADMIN_SESSION_COOKIE = '__Host-tokengate-admin'

const OWN = ADMIN_SESSION_COOKIE.toLowerCase()

/** Whether a `name=value` pair is one of tokengate's (names compared case-insensitively). */
function isOwn(pair: string): boolean {
  const eq = pair.indexOf('=')
  return (eq === -1 ? pair : pair.slice(0, eq)).trim().toLowerCase() === OWN
}

/** How many of tokengate's cookies a `Cookie` value carries (a browser sends at most one). */
export function countOwnCookies(cookie: string): number {
  if (!cookie.toLowerCase().includes(OWN)) return 0
  return cookie.split(';').filter(isOwn).length
}

/**
 * The `Cookie` value without tokengate's cookies, the others unchanged and in order;
 * undefined when none is left. The value itself when it holds none (the usual case).
 */
export function withoutOwnCookies(cookie: string): string | undefined {
  if (!cookie.toLowerCase().includes(OWN)) return cookie
  const kept = cookie
    .split(';')
    .map((pair) => pair.trim())
    .filter((pair) => pair !== '' && !isOwn(pair))
  return kept.length === 0 ? undefined : kept.join('; ')
}
