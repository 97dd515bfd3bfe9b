/**
 * Operator sign-in by redirect: OpenID Connect authorization code flow with PKCE (S256)
 * against `admin.oidc.issuer`, as Grafana, Argo CD or Kong Manager sign in. The pending
 * sign-in (state, nonce, PKCE verifier) lives only in a short-lived `__Host-` cookie, so any
 * instance can finish a sign-in another one started; the callback checks the state, swaps the
 * code at the token endpoint (with the client secret, or as a public client), verifies the ID
 * token with the operator issuer's keys and rules (`aud` = the client id) and its nonce, then
 * opens the same console session as a pasted credential.
 */
import { Buffer } from 'node:buffer'
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Config } from '../config/schema.ts'
import { checkJwksUrl, discoveryUrl } from '../core/jwks.ts'
import type { ConsoleKit } from './console-kit.ts'
import { html } from './html.ts'

/** The pending sign-in's cookie. Lax, not Strict: it must come back on the IdP's redirect. */
export const SSO_COOKIE = '__Host-tokengate-sso'
/** How long a started sign-in may take at the identity provider. */
export const SSO_PENDING_MS = 600_000
/** How long a discovery document is used before it is read again. */
const DISCOVERY_MAX_AGE_MS = 300_000

type OidcConfig = NonNullable<Config['admin']['oidc']>

interface ProviderMetadata {
  readonly authorizationEndpoint: URL
  readonly tokenEndpoint: URL
  readonly endSessionEndpoint: URL | undefined
}

/**
 * The issuer's discovery document, read when first needed and again after five minutes.
 * Its `issuer` must be exactly the configured one (OpenID Connect Discovery §4.3), every
 * endpoint https (http on loopback only), and PKCE S256 supported when it lists methods.
 */
function createDiscovery(oidc: OidcConfig, timeoutMs: number, now: () => number) {
  let cached: { metadata: ProviderMetadata; at: number } | undefined
  const endpoint = (value: unknown, name: string): URL => {
    if (typeof value !== 'string') throw new Error(`the discovery document has no ${name}`)
    return checkJwksUrl(value)
  }
  return async (): Promise<ProviderMetadata> => {
    if (cached && now() - cached.at < DISCOVERY_MAX_AGE_MS) return cached.metadata
    const response = await fetch(discoveryUrl(oidc.issuer), {
      headers: { accept: 'application/json' },
      redirect: 'error',
      signal: AbortSignal.timeout(timeoutMs),
    })
    if (!response.ok) throw new Error(`the discovery document answered ${response.status}`)
    const document = (await response.json()) as Record<string, unknown>
    if (document.issuer !== oidc.issuer) {
      throw new Error('the discovery document names another issuer')
    }
    const methods = document.code_challenge_methods_supported
    if (Array.isArray(methods) && !methods.includes('S256')) {
      throw new Error('the identity provider does not support PKCE with S256')
    }
    const metadata: ProviderMetadata = {
      authorizationEndpoint: endpoint(document.authorization_endpoint, 'authorization_endpoint'),
      tokenEndpoint: endpoint(document.token_endpoint, 'token_endpoint'),
      endSessionEndpoint:
        document.end_session_endpoint === undefined
          ? undefined
          : endpoint(document.end_session_endpoint, 'end_session_endpoint'),
    }
    cached = { metadata, at: now() }
    return metadata
  }
}

interface Pending {
  readonly state: string
  readonly nonce: string
  readonly verifier: string
  readonly expiresAt: number
}

const random = () => randomBytes(32).toString('base64url')

function readPending(request: FastifyRequest): Pending | undefined {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [name, value] = part.trim().split('=')
    if (name !== SSO_COOKIE || !value) continue
    const [state, nonce, verifier, expires] = value.split('.')
    if (!state || !nonce || !verifier || !expires) return undefined
    return { state, nonce, verifier, expiresAt: Number(expires) }
  }
  return undefined
}

/** Constant-time equality of two strings an attacker may have chosen one of. */
function same(a: unknown, b: string): boolean {
  if (typeof a !== 'string') return false
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

/** The routes of sign-in by redirect, and the IdP sign-out URL for the console's sign-out. */
export function registerSsoPages(kit: ConsoleKit): {
  endSessionUrl(request: FastifyRequest): Promise<string | undefined>
} {
  const { app, ctx, layout, page } = kit
  const oidc = ctx.config.admin.oidc
  const clientId = oidc?.clientId
  if (!oidc || !clientId) return { endSessionUrl: async () => undefined }
  const discover = createDiscovery(oidc, ctx.config.auth.jwksTimeoutMs, () => ctx.clock.now())
  const callbackUrl = (request: FastifyRequest) =>
    oidc.redirectUrl ?? `${request.protocol}://${request.headers.host}/admin/sso/callback`
  const clearPending = `${SSO_COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=0`

  /** A refused sign-in: a page that says what failed and starts over; the log says why. */
  const refused = (reply: FastifyReply, status: number, what: string, why: string) => {
    reply.log.warn({ reason: why }, `operator sign-in by redirect refused: ${what}`)
    return page(
      reply.header('set-cookie', clearPending),
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
    let metadata: ProviderMetadata
    try {
      metadata = await discover()
    } catch (error) {
      return refused(
        reply,
        503,
        'The identity provider could not be reached; try again in a moment.',
        (error as Error).message,
      )
    }
    const pending: Pending = {
      state: random(),
      nonce: random(),
      verifier: random(),
      expiresAt: ctx.clock.now() + SSO_PENDING_MS,
    }
    const target = new URL(metadata.authorizationEndpoint)
    const scopes = new Set(['openid', ...oidc.scopes])
    for (const [name, value] of Object.entries({
      response_type: 'code',
      client_id: clientId,
      redirect_uri: callbackUrl(request),
      scope: [...scopes].join(' '),
      state: pending.state,
      nonce: pending.nonce,
      code_challenge: createHash('sha256').update(pending.verifier).digest('base64url'),
      code_challenge_method: 'S256',
    })) {
      target.searchParams.set(name, value)
    }
    const value = [pending.state, pending.nonce, pending.verifier, pending.expiresAt].join('.')
    reply.header(
      'set-cookie',
      `${SSO_COOKIE}=${value}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=${SSO_PENDING_MS / 1000}`,
    )
    return reply.redirect(target.href, 303)
  })

  app.get('/admin/sso/callback', async (request, reply) => {
    const query = request.query as Record<string, string | undefined>
    const pending = readPending(request)
    if (query.error !== undefined) {
      // The IdP's own refusal (the operator cancelled, or is not allowed this client).
      const code = /^[\w.-]{1,64}$/.test(query.error) ? query.error : 'error'
      return refused(reply, 400, `The identity provider did not sign you in (${code}).`, code)
    }
    if (!pending || !(pending.expiresAt > ctx.clock.now())) {
      return refused(
        reply,
        400,
        'This sign-in expired or was started in another browser. Start it again from this page.',
        'no pending sign-in',
      )
    }
    // The state ties the answer to the sign-in this browser started (no login CSRF).
    if (!same(query.state, pending.state)) {
      return refused(
        reply,
        400,
        'The answer from the identity provider does not belong to the sign-in started here (state mismatch).',
        'state mismatch',
      )
    }
    // RFC 9207: an IdP that names itself must be ours (no mix-up with another provider).
    if (query.iss !== undefined && query.iss !== oidc.issuer) {
      return refused(reply, 400, 'The answer came from another identity provider.', 'iss mismatch')
    }
    if (typeof query.code !== 'string' || query.code === '') {
      return refused(reply, 400, 'The identity provider sent no sign-in code.', 'no code')
    }
    let idToken: unknown
    try {
      const metadata = await discover()
      const body = new URLSearchParams({
        grant_type: 'authorization_code',
        code: query.code,
        redirect_uri: callbackUrl(request),
        code_verifier: pending.verifier,
      })
      const headers: Record<string, string> = {
        accept: 'application/json',
        'content-type': 'application/x-www-form-urlencoded',
      }
      if (oidc.clientSecret === undefined) body.set('client_id', clientId)
      else {
        // RFC 6749 §2.3.1: both parts form-encoded before Basic.
        const basic = `${encodeURIComponent(clientId)}:${encodeURIComponent(oidc.clientSecret)}`
        headers.authorization = `Basic ${Buffer.from(basic).toString('base64')}`
      }
      const response = await fetch(metadata.tokenEndpoint, {
        method: 'POST',
        headers,
        body,
        redirect: 'error',
        signal: AbortSignal.timeout(ctx.config.auth.jwksTimeoutMs),
      })
      const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>
      if (!response.ok) {
        const code = typeof answer.error === 'string' ? answer.error.slice(0, 64) : 'error'
        return refused(
          reply,
          400,
          'The identity provider refused the sign-in code: it was used already, has expired, or was issued to another client.',
          `token endpoint ${response.status} ${code}`,
        )
      }
      idToken = answer.id_token
    } catch (error) {
      return refused(
        reply,
        503,
        'The identity provider could not be reached; try again in a moment.',
        (error as Error).message,
      )
    }
    if (typeof idToken !== 'string') {
      return refused(reply, 400, 'The identity provider sent no ID token.', 'no id_token')
    }
    const checked = await ctx.operators.verifyIdToken(idToken, ctx.config.admin.sessionTtlMs)
    if (!checked.ok) {
      return checked.reason === 'no_role'
        ? refused(
            reply,
            403,
            `You are signed in at the identity provider, but it grants you no console role: ask for operator or read-only in the ${oidc.roleClaim} claim.`,
            checked.detail,
          )
        : refused(
            reply,
            400,
            `The identity provider's ID token was refused: ${checked.detail}.`,
            checked.detail,
          )
    }
    // The nonce ties the ID token to this sign-in (no replay of another sign-in's token).
    if (!same(checked.nonce, pending.nonce)) {
      return refused(
        reply,
        400,
        "The identity provider's ID token belongs to another sign-in (nonce mismatch).",
        'nonce mismatch',
      )
    }
    await kit.startSession(request, reply, checked.operator)
    reply.header('set-cookie', clearPending)
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
    async endSessionUrl(request) {
      const metadata = await discover().catch(() => undefined)
      if (!metadata?.endSessionEndpoint) return undefined
      const target = new URL(metadata.endSessionEndpoint)
      target.searchParams.set('client_id', clientId)
      target.searchParams.set(
        'post_logout_redirect_uri',
        new URL('/admin/sign-in', callbackUrl(request)).href,
      )
      return target.href
    },
  }
}
