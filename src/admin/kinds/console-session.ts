/**
 * A console session: the session cookie the console sets at sign-in (admin/sessions.ts).
 * Claimed on console pages only (the admin API takes no cookies, so it has no CSRF surface);
 * each request re-checks what the session was opened with: its admin token (revoked,
 * expired) or its operator JWT (the JWT revocation rules).
 */
import { hmacFingerprint } from '../../core/fingerprint.ts'
import { headerValues } from '../../core/raw-headers.ts'
import { ADMIN_SESSION_COOKIE } from '../../http/own-cookies.ts'
import { type AdminCredentialKind, operatorLimiterKey, operatorPrincipal } from './admin-kind.ts'

const ENDED = {
  code: 'invalid_token',
  reason: 'unknown_token',
  detail: 'The console session has ended.',
} as const

/** The session cookie's value, if the request carries one. */
export function sessionCookieOf(rawHeaders: readonly string[] | undefined): string | undefined {
  if (rawHeaders === undefined) return undefined
  for (const header of headerValues(rawHeaders, 'cookie')) {
    for (const part of header.split(';')) {
      const [name, ...rest] = part.trim().split('=')
      if (name === ADMIN_SESSION_COOKIE) return rest.join('=')
    }
  }
  return undefined
}

export const consoleSessionKind: AdminCredentialKind = {
  name: 'console-session',
  create: (deps) => ({
    kind: 'console-session',
    claim: (request) => sessionCookieOf(request.headers),
    async authenticate(id) {
      const session = await deps.sessions.get(id, deps.clock.now())
      if (!session) return { ok: false, failure: ENDED }
      const failure = await deps.operators.refusal(session.operator)
      if (failure) {
        await deps.sessions.end(id)
        return { ok: false, failure }
      }
      return operatorPrincipal(
        'console-session',
        { ok: true, operator: session.operator },
        deps,
        session,
      )
    },
  }),
  fingerprint: hmacFingerprint,
  limiterKey: operatorLimiterKey,
  storedKeyId: () => undefined,
}
