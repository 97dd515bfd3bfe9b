import { readFileSync } from 'node:fs'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { OperationRefused } from '../auth/operations.ts'
import { ADMIN_SESSION_COOKIE } from '../http/own-cookies.ts'
import { adminGateRequest } from './admin-gate.ts'
import { registerAdminTokenPages } from './console-admin-tokens.ts'
import { registerAuditPages } from './console-audit.ts'
import { registerIssuerPages } from './console-issuers.ts'
import { registerJwtRevocationPages } from './console-jwt-revocations.ts'
import { registerKeyPages } from './console-keys.ts'
import {
  type ConsoleKit,
  type Form,
  FormRefused,
  type FormRequest,
  fieldOf,
  type Query,
} from './console-kit.ts'
import { registerSsoPages } from './console-sso.ts'
import { registerStatusPage } from './console-status.ts'
import { registerTenantPages } from './console-tenants.ts'
import { type AdminContext, operationDeps, problemFor, sendProblem } from './context.ts'
import { type Html, html, StatusPage } from './html.ts'
import { sessionCookieOf } from './kinds/console-session.ts'
import type { Operator } from './operators.ts'
import { csrfMatches, type Session } from './sessions.ts'

/** `__Host-`: Secure, Path=/ and no Domain are enforced by the browser, so no subdomain sets it. */
export const SESSION_COOKIE = ADMIN_SESSION_COOKIE
const ASSETS = new URL('./assets/', import.meta.url)
const asset = (name: string) => readFileSync(new URL(name, ASSETS))
const FORM_TYPE = /^application\/x-www-form-urlencoded\s*(;|$)/i

/**
 * The web console: server-rendered pages over the same application functions as the admin
 * API and the CLI. Writes are HTML form posts carrying the session's CSRF token, from this
 * origin only; each one redirects (303) so a reload never repeats it, except a refused form,
 * which is answered again with what was typed and the refused field named.
 */
export function registerConsole(app: FastifyInstance, ctx: AdminContext): ConsolePages {
  const { clock, sessions } = ctx
  const css = asset('console.css')
  const js = asset('console.js')

  app.get('/admin/assets/console.css', (_r, reply) =>
    reply.header('cache-control', 'no-cache').type('text/css; charset=utf-8').send(css),
  )
  app.get('/admin/assets/console.js', (_r, reply) =>
    reply.header('cache-control', 'no-cache').type('text/javascript; charset=utf-8').send(js),
  )

  const cookieOf = (request: FastifyRequest) => sessionCookieOf(request.raw.rawHeaders)

  /** Opens a console session for a verified operator and sets its cookie. */
  async function startSession(
    request: FastifyRequest,
    reply: FastifyReply,
    operator: Operator,
  ): Promise<Session> {
    await sessions.end(cookieOf(request))
    const session = await sessions.create(operator, clock.now())
    const maxAge = Math.max(1, Math.floor((session.expiresAt - clock.now()) / 1000))
    reply.header(
      'set-cookie',
      `${SESSION_COOKIE}=${session.id}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=${maxAge}`,
    )
    return session
  }

  /**
   * Where a request without a live session goes: the sign-in page, which says the session
   * ended when the browser still sent a cookie (expired, idle, or its credential revoked).
   */
  const signInFor = (request: FastifyRequest) =>
    cookieOf(request) ? '/admin/sign-in?ended=1' : '/admin/sign-in'

  /** The live session of a request, through the admin gate (kinds/console-session.ts). */
  async function sessionOf(request: FastifyRequest): Promise<Session | undefined> {
    if (cookieOf(request) === undefined) return undefined
    const outcome = await ctx.gate.checkConsole(adminGateRequest(request, 'console'))
    if (!outcome.allowed) return undefined
    const session = ctx.gate.sessionOf(outcome)
    if (session) request.operator = session.operator
    return session
  }

  /** The origin this listener is reached at, from the Host header the browser sent. */
  const ownOrigin = (request: FastifyRequest) => `${request.protocol}://${request.headers.host}`

  /** Cross-origin form posts fail here whatever cookies the browser attached. */
  function sameOrigin(request: FastifyRequest): boolean {
    const origin = request.headers.origin
    const site = request.headers['sec-fetch-site']
    if (site !== undefined && site !== 'same-origin') return false
    return origin === ownOrigin(request)
  }

  const page: ConsoleKit['page'] = (reply, status, body) =>
    reply.code(status).type('text/html; charset=utf-8').send(`<!doctype html>\n${body}`)

  function layout(title: string, session: Session | undefined, content: Html, current = ''): Html {
    // The session's one-shot notice (kept in the store, so any instance shows it); the page
    // that shows it clears it (`view`).
    const notice = session?.notice
    const nav = [
      ['tenants', 'Tenants'],
      ['pats', 'Tokens'],
      ['issuers', 'Issuers'],
      ['audit', 'Audit log'],
      ['admin-tokens', 'Admin tokens'],
      ['status', 'Status'],
    ] as const
    return html`<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · tokengate console</title>
<link rel="stylesheet" href="/admin/assets/console.css">
<script src="/admin/assets/console.js" defer></script>
</head><body>
<a class="skip" href="#main">Skip to content</a>
<header><span class="brand">tokengate console</span>
${
  session
    ? html`<nav aria-label="Sections"><ul>${nav.map(
        ([path, label]) =>
          html`<li><a href="/admin/${path}" ${current === path ? html`aria-current="page"` : ''}>${label}</a></li>`,
      )}</ul></nav>
<div class="who"><span data-testid="operator">${session.operator.actor}</span> <span class="role">${session.operator.role}</span>
<form method="post" action="/admin/sign-out">${csrfField(session)}<button type="submit">Sign out</button></form></div>`
    : ''
}
</header>
<main id="main" tabindex="-1"><h1>${title}</h1>
${notice ? html`<p class="notice ${notice.kind}" role="${notice.kind === 'error' ? 'alert' : 'status'}">${notice.text}</p>` : ''}
${content}</main></body></html>`
  }

  const csrfField = (session: Session) =>
    html`<input type="hidden" name="_csrf" value="${session.csrf}">`
  const canWrite = (session: Session) => session.operator.role === 'operator'
  const op = (request: FastifyRequest, session: Session) =>
    operationDeps(request, session.operator, ctx)

  /** A read page: signed-in operators only, else to the sign-in page. */
  const view: ConsoleKit['view'] = (path, render) => {
    app.get(path, async (request, reply) => {
      const session = await sessionOf(request)
      if (!session) return reply.redirect(signInFor(request), 303)
      try {
        const body = await render(request, session)
        if (session.notice) await sessions.setNotice(session, undefined)
        return page(reply, body instanceof StatusPage ? body.status : 200, body)
      } catch (error) {
        const mapped = problemFor(error)
        if (!mapped) throw error
        // Shown on this very page: nothing to keep.
        session.notice = { kind: 'error', text: mapped.detail }
        return page(
          reply,
          mapped.status,
          layout('Error', session, html`<p><a href="${path}">Back</a></p>`),
        )
      }
    })
  }

  /** A console write that is not a form post (a script's JSON, a multipart upload) is 415. */
  const notAForm = (request: FastifyRequest, reply: FastifyReply) =>
    FORM_TYPE.test(request.headers['content-type'] ?? '')
      ? undefined
      : sendProblem(
          reply,
          415,
          'unsupported_media_type',
          'Console forms are application/x-www-form-urlencoded.',
          request,
        )

  const action: ConsoleKit['action'] = (path, back, run, rerender) => {
    app.post<{ Body: Form; Params: Record<string, string> }>(path, async (request, reply) => {
      if (!sameOrigin(request)) {
        return reply
          .code(403)
          .type('text/plain; charset=utf-8')
          .send('Cross-origin request refused.')
      }
      const refusedType = notAForm(request, reply)
      if (refusedType) return refusedType
      const session = await sessionOf(request)
      if (!session) return reply.redirect(signInFor(request), 303)
      if (!csrfMatches(session, request.body?._csrf)) {
        return reply
          .code(403)
          .type('text/plain; charset=utf-8')
          .send('Invalid CSRF token; reload the page.')
      }
      if (!canWrite(session)) {
        return reply
          .code(403)
          .type('text/plain; charset=utf-8')
          .send('This action needs the operator role.')
      }
      let target = typeof back === 'string' ? back : back(request as FormRequest)
      try {
        const message = await run(request as FormRequest, session)
        if (message.startsWith('/')) target = message
        else await sessions.setNotice(session, { kind: 'ok', text: message })
      } catch (error) {
        const mapped = problemFor(error)
        if (!mapped) throw error
        if (rerender && error instanceof OperationRefused) {
          const { _csrf: _, ...values } = request.body ?? {}
          // A lifetime over the policy names the form's expiry field, whatever its subject.
          const field =
            error.code === 'lifetime_exceeded'
              ? 'expiresAt' in values
                ? 'expiresAt'
                : 'expiresInDays'
              : fieldOf(error.subject)
          const errors =
            error instanceof FormRefused ? error.errors : [{ field, message: mapped.detail }]
          const form = { values, errors }
          return page(reply, mapped.status, await rerender(request as FormRequest, session, form))
        }
        await sessions.setNotice(session, { kind: 'error', text: mapped.detail })
      }
      return reply.redirect(target, 303)
    })
  }

  app.get('/admin', (_r, reply) => reply.redirect('/admin/', 303))
  app.get('/admin/', async (request, reply) =>
    reply.redirect((await sessionOf(request)) ? '/admin/tenants' : '/admin/sign-in', 303),
  )

  const sso = ctx.config.admin.oidc?.clientId ? ctx.config.admin.oidc : undefined
  app.get('/admin/sign-in', async (request, reply) => {
    const query = request.query as Query
    const message =
      query.failed === '1'
        ? html`<p class="notice error" role="alert">That credential was not accepted.</p>`
        : query.throttled === '1'
          ? html`<p class="notice error" role="alert" data-testid="sign-in-throttled">Too many failed sign-ins from this address: try again once the failed-authentication window (rateLimit.failedAuth) has passed.</p>`
          : query.ended === '1'
            ? html`<p class="notice error" role="alert" data-testid="session-ended">Your session has ended: it expired, was unused too long, or its credential was revoked. Sign in again.</p>`
            : ''
    if (query.ended === '1') {
      reply.header(
        'set-cookie',
        `${SESSION_COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0`,
      )
    }
    return page(
      reply,
      200,
      layout(
        'Sign in',
        undefined,
        html`${message}
${
  sso
    ? html`<div class="card sso"><a class="button" href="/admin/sso/start">Sign in with ${new URL(sso.issuer).host}</a>
<p class="help">Your company's identity provider signs you in; your role comes from its <code>${sso.roleClaim}</code> claim.</p></div>`
    : ''
}
<form method="post" action="/admin/sign-in" class="card" autocomplete="off">
${sso ? html`<h2>Or paste a credential</h2>` : ''}
<label for="credential">Admin token or operator JWT</label>
<input id="credential" name="credential" type="password" required ${sso ? '' : html`autofocus`} spellcheck="false" aria-describedby="credential-help">
<p id="credential-help" class="help">Issue one with <code>tokengate admin token issue --name you --role operator</code>. It is sent once and kept only as a session cookie.</p>
<button type="submit">Sign in</button></form>`,
      ),
    )
  })
  app.post<{ Body: Form }>('/admin/sign-in', async (request, reply) => {
    // No session yet, so no CSRF token: the Origin check stops login CSRF (a forged form
    // signing the victim into the attacker's account).
    if (!sameOrigin(request)) {
      return reply.code(403).type('text/plain; charset=utf-8').send('Cross-origin request refused.')
    }
    const refusedType = notAForm(request, reply)
    if (refusedType) return refusedType
    // A pasted credential is the API's: the same kinds, limit and audit (admin-gate.ts).
    const credential = request.body?.credential ?? ''
    const outcome = await ctx.gate.check(adminGateRequest(request, 'sign-in', credential))
    if (!outcome.allowed) {
      // Over `rateLimit.failedAuth`: the credential was not even looked at, so say so.
      const why = outcome.status === 429 ? 'throttled' : 'failed'
      return reply.redirect(`/admin/sign-in?${why}=1`, 303)
    }
    await startSession(request, reply, ctx.gate.operatorOf(outcome))
    return reply.redirect('/admin/tenants', 303)
  })
  app.post<{ Body: Form }>('/admin/sign-out', async (request, reply) => {
    if (!sameOrigin(request)) return reply.code(403).send('Cross-origin request refused.')
    const session = await sessionOf(request)
    const ended = session !== undefined && csrfMatches(session, request.body?._csrf)
    if (ended) await sessions.end(cookieOf(request))
    reply.header(
      'set-cookie',
      `${SESSION_COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0`,
    )
    // An operator who came from the identity provider signs out there too, where it offers
    // an end-session endpoint (OpenID Connect RP-Initiated Logout); it sends them back here.
    // A page that moves on, not a redirect: the CSP's form-action 'self' stops a form post's
    // redirect to another origin.
    const idp =
      ended && session.operator.actor.startsWith('oidc:')
        ? await ssoPages.endSessionUrl(request)
        : undefined
    if (!idp) return reply.redirect('/admin/sign-in', 303)
    return page(
      reply,
      200,
      html`<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=${idp}">
<title>Signed out · tokengate console</title><link rel="stylesheet" href="/admin/assets/console.css"></head>
<body><main id="main"><h1>Signed out of the console</h1><p><a href="${idp}">Sign out at your identity provider too</a></p></main></body></html>`,
    )
  })

  const kit: ConsoleKit = {
    app,
    ctx,
    view,
    action,
    layout,
    csrfField,
    canWrite,
    op,
    page,
    sessionOf,
    startSession,
  }
  const ssoPages = registerSsoPages(kit)
  registerTenantPages(kit)
  registerKeyPages(kit)
  registerIssuerPages(kit)
  registerJwtRevocationPages(kit)
  registerAuditPages(kit)
  registerAdminTokenPages(kit)
  registerStatusPage(kit)

  return {
    async notFound(request, reply) {
      // The URL is not echoed: it may carry whatever a link or a typo put in it.
      const session = await sessionOf(request).catch(() => undefined)
      return page(
        reply,
        404,
        layout(
          'Page not found',
          session,
          html`<p>There is no console page at this address. It may have been mistyped, or it named a tenant, token or issuer that no longer exists.</p>
<p>${session ? html`<a href="/admin/tenants">Go to the tenants</a> or pick a section above.` : html`<a href="/admin/sign-in">Sign in</a> to the console.`}</p>`,
        ),
      )
    },
  }
}

/** What the listener needs of the console beyond its routes. */
export interface ConsolePages {
  /** The HTML 404 page, for a browser that asked for a page that does not exist. */
  notFound(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply>
}
