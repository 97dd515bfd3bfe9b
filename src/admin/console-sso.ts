/**
 * Operator sign-in by redirect: OpenID Connect authorization code flow with PKCE (S256)
 * against `admin.oidc.issuer`, as Grafana, Argo CD or Kong Manager sign in. The pending
 * sign-in (state, nonce, PKCE verifier) lives only in a short-lived `__Host-` cookie, so any
 * instance can finish a sign-in another one started; the callback checks the state, swaps the
 * code at the token endpoint (with the client secret, or as a public client), verifies the ID
 * token with the operator issuer's keys and rules (`aud` = the client id) and its nonce, then
 * opens the same console session as a pasted credential. The protocol is oidc-client.ts.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { SIGN_IN_COOKIE } from '../http/own-cookies.ts'
import type { ConsoleKit } from './console-kit.ts'
import { html } from './html.ts'
import {
  createOidcClient,
  decodePendingSignIn,
  encodePendingSignIn,
  newPendingSignIn,
  PENDING_SIGN_IN_MS,
  type PendingSignIn,
  sameSecret,
} from './oidc-client.ts'

/** The pending sign-in's cookie. Lax, not Strict: it must come back on the IdP's redirect. */
export const SSO_COOKIE = SIGN_IN_COOKIE
const CLEAR_PENDING = `${SSO_COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=0`
const UNREACHABLE = 'The identity provider could not be reached; try again in a moment.'

/** A refusal of the callback: the status, what the page says, and why (for the log). */
interface Refusal {
  readonly status: number
  readonly what: string
  readonly why: string
}

function pendingOf(request: FastifyRequest): PendingSignIn | undefined {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [name, value] = part.trim().split('=')
    if (name === SSO_COOKIE && value) return decodePendingSignIn(value)
  }
  return undefined
}

/**
 * The provider's answer as it reached the callback, checked against the browser's pending
 * sign-in: the authorization code, or why it is refused.
 */
function checkAnswer(
  query: Record<string, string | undefined>,
  pending: PendingSignIn | undefined,
  issuer: string,
  now: number,
): { readonly code: string; readonly pending: PendingSignIn } | Refusal {
  if (query.error !== undefined) {
    // The IdP's own refusal (the operator cancelled, or may not use this client).
    const code = /^[\w.-]{1,64}$/.test(query.error) ? query.error : 'error'
    return { status: 400, what: `The identity provider did not sign you in (${code}).`, why: code }
  }
  if (!pending || !(pending.expiresAt > now)) {
    return {
      status: 400,
      what: 'This sign-in expired or was started in another browser. Start it again from this page.',
      why: 'no pending sign-in',
    }
  }
  // The state ties the answer to the sign-in this browser started (no login CSRF).
  if (!sameSecret(query.state, pending.state)) {
    return {
      status: 400,
      what: 'The answer from the identity provider does not belong to the sign-in started here (state mismatch).',
      why: 'state mismatch',
    }
  }
  // RFC 9207: a provider that names itself must be ours (no mix-up with another provider).
  if (query.iss !== undefined && query.iss !== issuer) {
    return { status: 400, what: 'The answer came from another identity provider.', why: 'iss' }
  }
  if (!query.code) {
    return { status: 400, what: 'The identity provider sent no sign-in code.', why: 'no code' }
  }
  return { code: query.code, pending }
}

/** The routes of sign-in by redirect, and the IdP sign-out URL for the console's sign-out. */
export function registerSsoPages(kit: ConsoleKit): {
  endSessionUrl(request: FastifyRequest): Promise<string | undefined>
} {
  const { app, ctx, layout, page } = kit
  const oidc = ctx.config.admin.oidc
  const clientId = oidc?.clientId
  if (!oidc || !clientId) return { endSessionUrl: async () => undefined }
  const client = createOidcClient(
    { ...oidc, clientId },
    { timeoutMs: ctx.config.auth.jwksTimeoutMs, now: () => ctx.clock.now() },
  )
  const callbackUrl = (request: FastifyRequest) =>
    oidc.redirectUrl ?? `${request.protocol}://${request.headers.host}/admin/sso/callback`

  /** A refused sign-in: a page that says what failed and starts over; the log says why. */
  const refuse = (reply: FastifyReply, { status, what, why }: Refusal) => {
    reply.log.warn({ reason: why }, `operator sign-in by redirect refused: ${what}`)
    return page(
      reply.header('set-cookie', CLEAR_PENDING),
      status,
      layout(
        'Sign-in refused',
        undefined,
        html`<p class="notice error" role="alert" data-testid="sso-refused">${what}</p>
<p>Nothing was signed in. <a href="/admin/sign-in">Start again</a>.</p>`,
      ),
    )
  }

  app.get('/admin/sso/start', async (request, reply) => {
    const pending = newPendingSignIn(ctx.clock.now())
    let target: string
    try {
      target = await client.authorizationUrl(callbackUrl(request), pending)
    } catch (error) {
      return refuse(reply, { status: 503, what: UNREACHABLE, why: (error as Error).message })
    }
    reply.header(
      'set-cookie',
      `${SSO_COOKIE}=${encodePendingSignIn(pending)}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=${PENDING_SIGN_IN_MS / 1000}`,
    )
    return reply.redirect(target, 303)
  })

  app.get('/admin/sso/callback', async (request, reply) => {
    const answer = checkAnswer(
      request.query as Record<string, string | undefined>,
      pendingOf(request),
      oidc.issuer,
      ctx.clock.now(),
    )
    if (!('code' in answer)) return refuse(reply, answer)
    const { code, pending } = answer

    let exchanged: Awaited<ReturnType<typeof client.exchangeCode>>
    try {
      exchanged = await client.exchangeCode(code, callbackUrl(request), pending.verifier)
    } catch (error) {
      return refuse(reply, { status: 503, what: UNREACHABLE, why: (error as Error).message })
    }
    if (!exchanged.ok) {
      return refuse(reply, {
        status: 400,
        what: 'The identity provider refused the sign-in code: it was used already, has expired, or was issued to another client.',
        why: `token endpoint ${exchanged.status} ${exchanged.error}`,
      })
    }
    if (exchanged.idToken === undefined) {
      return refuse(reply, {
        status: 400,
        what: 'The identity provider sent no ID token.',
        why: 'no id_token',
      })
    }

    const checked = await ctx.operators.verifyIdToken(
      exchanged.idToken,
      ctx.config.admin.sessionTtlMs,
    )
    if (!checked.ok) {
      return refuse(
        reply,
        checked.reason === 'no_role'
          ? {
              status: 403,
              what: `You are signed in at the identity provider, but it grants you no console role: ask for operator or read-only in the ${oidc.roleClaim} claim.`,
              why: checked.detail,
            }
          : {
              status: 400,
              what: `The identity provider's ID token was refused: ${checked.detail}.`,
              why: checked.detail,
            },
      )
    }
    // The nonce ties the ID token to this sign-in (no replay of another sign-in's token).
    if (!sameSecret(checked.nonce, pending.nonce)) {
      return refuse(reply, {
        status: 400,
        what: "The identity provider's ID token belongs to another sign-in (nonce mismatch).",
        why: 'nonce mismatch',
      })
    }

    await kit.startSession(request, reply, checked.operator)
    reply.header('set-cookie', CLEAR_PENDING)
    // A page, not a redirect: the session cookie is SameSite=Strict, and a redirect chain that
    // began at the identity provider is cross-site, so the browser would not send it yet.
    // The refresh is a same-origin navigation (the CSP allows no inline script).
    return page(
      reply,
      200,
      html`<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/admin/tenants">
<title>Signed in · tokengate console</title><link rel="stylesheet" href="/admin/assets/console.css"></head>
<body><main id="main"><h1>Signed in</h1><p><a href="/admin/tenants">Continue to the console</a></p></main></body></html>`,
    )
  })

  return {
    endSessionUrl: (request) =>
      client.endSessionUrl(new URL('/admin/sign-in', callbackUrl(request)).href),
  }
}
