import { readFileSync } from 'node:fs'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { addIssuer, removeIssuer } from '../auth/issuer-operations.ts'
import type { PatOperationDeps } from '../auth/pat-lifecycle.ts'
import { revokeLeakedPats, revokeTenantPat, rotateTenantPat } from '../auth/pat-lifecycle.ts'
import { setTenantEnabled } from '../auth/tenant-operations.ts'
import { patStatus } from '../core/pat.ts'
import { ADMIN_SESSION_COOKIE } from '../http/own-cookies.ts'
import {
  auditQuery,
  createNamedTenant,
  exportAudit,
  issuePat,
  lifetimeFrom,
  patQuery,
} from './api.ts'
import { trafficChart } from './chart.ts'
import { type AdminContext, operationDeps, problemFor } from './context.ts'
import { type Html, html, time } from './html.ts'
import { invalid } from './input.ts'
import { csrfMatches, type Session } from './sessions.ts'
import { readStatus } from './status.ts'
import { auditCsv, auditView, issuerView } from './views.ts'

/** `__Host-`: Secure, Path=/ and no Domain are enforced by the browser, so no subdomain sets it. */
export const SESSION_COOKIE = ADMIN_SESSION_COOKIE
const ASSETS = new URL('./assets/', import.meta.url)
const asset = (name: string) => readFileSync(new URL(name, ASSETS))

type Form = Record<string, string | undefined>
type Query = Record<string, string | undefined>

/**
 * The web console: server-rendered pages over the same application functions as the admin
 * API and the CLI. Writes are HTML form posts carrying the session's CSRF token, from this
 * origin only; each one redirects (303) so a reload never repeats it.
 */
export function registerConsole(app: FastifyInstance, ctx: AdminContext): void {
  const { store, clock, sessions } = ctx
  const css = asset('console.css')
  const js = asset('console.js')

  app.get('/admin/assets/console.css', (_r, reply) =>
    reply.header('cache-control', 'no-cache').type('text/css; charset=utf-8').send(css),
  )
  app.get('/admin/assets/console.js', (_r, reply) =>
    reply.header('cache-control', 'no-cache').type('text/javascript; charset=utf-8').send(js),
  )

  function cookieOf(request: FastifyRequest): string | undefined {
    for (const part of (request.headers.cookie ?? '').split(';')) {
      const [name, ...rest] = part.trim().split('=')
      if (name === SESSION_COOKIE) return rest.join('=')
    }
    return undefined
  }

  async function sessionOf(request: FastifyRequest): Promise<Session | undefined> {
    const id = cookieOf(request)
    const session = await sessions.get(id, clock.now())
    if (!session) return undefined
    if (!(await ctx.operators.stillValid(session.operator))) {
      await sessions.end(id)
      return undefined
    }
    request.operator = session.operator
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

  const page = (reply: FastifyReply, status: number, body: Html) =>
    reply.code(status).type('text/html; charset=utf-8').send(`<!doctype html>\n${body}`)

  /** Renders a page; the session's notice is shown here (the caller clears it: `page`). */
  function layout(title: string, session: Session | undefined, content: Html, current = ''): Html {
    const notice = session?.notice
    const nav = [
      ['tenants', 'Tenants'],
      ['pats', 'Tokens'],
      ['issuers', 'Issuers'],
      ['audit', 'Audit log'],
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
  const op = (request: FastifyRequest, session: Session): PatOperationDeps =>
    operationDeps(request, session.operator, ctx)

  /** A read page: signed-in operators only, else to the sign-in page. */
  function view(
    path: string,
    render: (request: FastifyRequest, session: Session) => Promise<Html>,
  ): void {
    app.get(path, async (request, reply) => {
      const session = await sessionOf(request)
      if (!session) return reply.redirect('/admin/sign-in', 303)
      try {
        const body = await render(request, session)
        if (session.notice) await sessions.setNotice(session, undefined)
        return page(reply, 200, body)
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

  /**
   * A write: same origin, a valid CSRF token, the operator role; then the action, a notice,
   * and a 303 to `back` (POST-redirect-GET).
   */
  function action(
    path: string,
    back: string,
    run: (
      request: FastifyRequest<{ Body: Form; Params: Record<string, string> }>,
      session: Session,
    ) => Promise<string>,
  ): void {
    app.post<{ Body: Form; Params: Record<string, string> }>(path, async (request, reply) => {
      if (!sameOrigin(request)) {
        return reply
          .code(403)
          .type('text/plain; charset=utf-8')
          .send('Cross-origin request refused.')
      }
      const session = await sessionOf(request)
      if (!session) return reply.redirect('/admin/sign-in', 303)
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
      let target = back
      try {
        const message = await run(request, session)
        if (message.startsWith('/')) target = message
        else await sessions.setNotice(session, { kind: 'ok', text: message })
      } catch (error) {
        const mapped = problemFor(error)
        if (!mapped) throw error
        await sessions.setNotice(session, { kind: 'error', text: mapped.detail })
      }
      return reply.redirect(target, 303)
    })
  }

  app.get('/admin', (_r, reply) => reply.redirect('/admin/', 303))
  app.get('/admin/', async (request, reply) =>
    reply.redirect((await sessionOf(request)) ? '/admin/tenants' : '/admin/sign-in', 303),
  )

  app.get('/admin/sign-in', async (request, reply) => {
    const failed = (request.query as Query).failed === '1'
    return page(
      reply,
      200,
      layout(
        'Sign in',
        undefined,
        html`${failed ? html`<p class="notice error" role="alert">That credential was not accepted.</p>` : ''}
<form method="post" action="/admin/sign-in" class="card" autocomplete="off">
<label for="credential">Admin token or operator JWT</label>
<input id="credential" name="credential" type="password" required autofocus spellcheck="false" aria-describedby="credential-help">
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
    const credential = request.body?.credential ?? ''
    const checked = await ctx.operators.verify(credential)
    if (!checked.ok) return reply.redirect('/admin/sign-in?failed=1', 303)
    await sessions.end(cookieOf(request))
    const session = await sessions.create(checked.operator, clock.now())
    const id = session.id
    const maxAge = Math.max(1, Math.floor((session.expiresAt - clock.now()) / 1000))
    reply.header(
      'set-cookie',
      `${SESSION_COOKIE}=${id}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=${maxAge}`,
    )
    return reply.redirect('/admin/tenants', 303)
  })
  app.post<{ Body: Form }>('/admin/sign-out', async (request, reply) => {
    if (!sameOrigin(request)) return reply.code(403).send('Cross-origin request refused.')
    const session = await sessionOf(request)
    if (session && csrfMatches(session, request.body?._csrf)) await sessions.end(cookieOf(request))
    reply.header(
      'set-cookie',
      `${SESSION_COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0`,
    )
    return reply.redirect('/admin/sign-in', 303)
  })

  // Tenants
  view('/admin/tenants', async (_request, session) => {
    const tenants = await store.listTenants()
    return layout(
      'Tenants',
      session,
      html`${
        canWrite(session)
          ? html`<form method="post" action="/admin/tenants" class="card inline">${csrfField(session)}
<div><label for="tenant-id">Tenant id</label><input id="tenant-id" name="id" required pattern="[A-Za-z0-9._\\-]{1,64}" maxlength="64"></div>
<div><label for="tenant-name">Name</label><input id="tenant-name" name="name" maxlength="200"></div>
<button type="submit">Create tenant</button></form>`
          : ''
      }
<table><caption>${tenants.length} tenants</caption><thead><tr><th scope="col">Id</th><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Created</th>${canWrite(session) ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
<tbody>${tenants.map(
        (
          t,
        ) => html`<tr><td><a href="/admin/pats?tenant=${encodeURIComponent(t.id)}">${t.id}</a></td><td>${t.name}</td>
<td>${t.enabled ? 'enabled' : html`<strong>disabled</strong>`}</td><td>${time(t.createdAt)}</td>
${
  canWrite(session)
    ? html`<td><form method="post" action="/admin/tenants/${encodeURIComponent(t.id)}/${t.enabled ? 'disable' : 'enable'}">${csrfField(session)}
<button type="submit" aria-label="${t.enabled ? 'Disable' : 'Enable'} tenant ${t.id}">${t.enabled ? 'Disable' : 'Enable'}</button></form></td>`
    : ''
}</tr>`,
      )}</tbody></table>`,
      'tenants',
    )
  })
  action('/admin/tenants', '/admin/tenants', async (request, session) => {
    const tenant = await createNamedTenant(
      op(request, session),
      request.body.id ?? '',
      request.body.name,
    )
    return `Created tenant ${tenant.id}.`
  })
  for (const [verb, enabled] of [
    ['enable', true],
    ['disable', false],
  ] as const) {
    action(`/admin/tenants/:id/${verb}`, '/admin/tenants', async (request, session) => {
      const id = request.params.id as string
      const { changed } = await setTenantEnabled(op(request, session), id, enabled)
      return changed ? `Tenant ${id} ${verb}d.` : `Tenant ${id} was already ${verb}d.`
    })
  }

  // Tokens
  view('/admin/pats', async (request, session) => {
    const q = request.query as Query
    const now = clock.now()
    const { search, status, page: p } = patQuery(q, now)
    const result = await store.admin.searchPats(search, p)
    const rows = result.items.filter((r) => status === undefined || patStatus(r, now) === status)
    const tenants = await store.listTenants()
    const next = result.nextCursor
      ? `/admin/pats?${new URLSearchParams({ ...clean(q), cursor: result.nextCursor })}`
      : undefined
    return layout(
      'Personal access tokens',
      session,
      html`<form method="get" action="/admin/pats" class="card inline" role="search" aria-label="Search tokens">
<div><label for="f-tenant">Tenant</label><input id="f-tenant" name="tenant" value="${q.tenant ?? ''}"></div>
<div><label for="f-subject">Subject</label><input id="f-subject" name="subject" value="${q.subject ?? ''}"></div>
<div><label for="f-name">Name</label><input id="f-name" name="name" value="${q.name ?? ''}"></div>
<div><label for="f-last4">Last 4</label><input id="f-last4" name="last4" maxlength="4" size="4" value="${q.last4 ?? ''}"></div>
<div><label for="f-status">Status</label><select id="f-status" name="status">${['', 'active', 'grace', 'rotated', 'expired', 'revoked'].map((s) => html`<option value="${s}" ${q.status === s ? html`selected` : ''}>${s || 'any'}</option>`)}</select></div>
<div><label for="f-exp">Expiring within (days)</label><input id="f-exp" name="expiringWithinDays" inputmode="numeric" size="4" value="${q.expiringWithinDays ?? ''}"></div>
<button type="submit">Search</button></form>
${
  canWrite(session)
    ? html`<details class="card"><summary>Issue a token</summary>
<form method="post" action="/admin/pats">${csrfField(session)}
<label for="i-tenant">Tenant</label><select id="i-tenant" name="tenantId" required>${tenants.filter((t) => t.enabled).map((t) => html`<option value="${t.id}" ${q.tenant === t.id ? html`selected` : ''}>${t.id}</option>`)}</select>
<label for="i-subject">Subject</label><input id="i-subject" name="subject" required maxlength="255">
<label for="i-name">Name</label><input id="i-name" name="name" maxlength="100">
<label for="i-perms">Permissions (space-separated)</label><input id="i-perms" name="permissions" placeholder="tokens:read audit:read">
<label for="i-exp">Expires in (days; empty = default${ctx.config.pat.maxExpiresInDays === 0 ? ', never = no expiry' : ''})</label><input id="i-exp" name="expiresInDays">
<button type="submit">Issue token</button></form></details>
<details class="card"><summary>Revoke a leaked token</summary>
<form method="post" action="/admin/pats/revoke-leaked" autocomplete="off">${csrfField(session)}
<label for="leak">Paste the leaked token (pat_…)</label><input id="leak" name="token" type="password" required spellcheck="false">
<button type="submit">Revoke leaked token</button></form></details>`
    : ''
}
<table><caption>Tokens${search.tenantId ? html` of ${search.tenantId}` : ''}</caption><thead><tr><th scope="col">Token</th><th scope="col">Tenant</th><th scope="col">Subject</th><th scope="col">Name</th><th scope="col">Permissions</th><th scope="col">Status</th><th scope="col">Expires</th><th scope="col">Last used</th>${canWrite(session) ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
<tbody>${rows.map(
        (
          r,
        ) => html`<tr data-token-id="${r.id}"><td><code>pat_…${r.last4}</code><br><small>${r.id}</small></td><td>${r.tenantId}</td><td>${r.subject}</td><td>${r.name}</td>
<td>${r.permissions.join(' ') || '—'}</td><td><span class="status status-${patStatus(r, now)}">${patStatus(r, now)}</span></td>
<td>${time(r.expiresAt, 'never')}</td><td>${time(r.lastUsedAt, 'never')}</td>
${
  canWrite(session)
    ? html`<td>${
        r.revokedAt === null
          ? html`<form method="post" action="/admin/pats/${r.id}/revoke" data-confirm="Revoke pat_…${r.last4}? Callers using it get 401 at once.">${csrfField(session)}
<button type="submit" class="danger" aria-label="Revoke token ${r.id}">Revoke</button></form>${
              r.supersededAt == null
                ? html`
<form method="post" action="/admin/pats/${r.id}/rotate">${csrfField(session)}
<label>grace (h) <input name="graceHours" value="0" size="3" inputmode="numeric" aria-label="Grace hours for ${r.id}"></label>
<button type="submit" aria-label="Rotate token ${r.id}">Rotate</button></form>`
                : ''
            }`
          : ''
      }</td>`
    : ''
}</tr>`,
      )}</tbody></table>
${next ? html`<p><a href="${next}">Next page</a></p>` : ''}`,
      'pats',
    )
  })
  action('/admin/pats', '/admin/pats', async (request, session) => {
    const b = request.body
    const { token, record } = await issuePat(op(request, session), {
      tenantId: b.tenantId ?? '',
      subject: b.subject ?? '',
      name: b.name,
      permissions: (b.permissions ?? '').split(/\s+/).filter(Boolean),
      lifetime: lifetimeFrom(b.expiresInDays?.trim()),
    })
    await sessions.setFlash(session, {
      token,
      label: `${record.id} for ${record.subject} (tenant ${record.tenantId})`,
    })
    return '/admin/pats/issued'
  })
  app.get('/admin/pats/issued', async (request, reply) => {
    const session = await sessionOf(request)
    if (!session) return reply.redirect('/admin/sign-in', 303)
    // Shown once: cleared in the store before the page leaves.
    const flash = await sessions.takeFlash(session)
    return page(
      reply,
      200,
      layout(
        flash ? 'Token issued' : 'Token already shown',
        session,
        flash
          ? html`<div class="card shown-once" role="dialog" aria-labelledby="once-title" aria-describedby="once-help">
<h2 id="once-title">Copy the new token now</h2>
<p id="once-help">Token ${flash.label}. It is shown <strong>once</strong>: it is not stored and cannot be shown again.</p>
<label for="new-token">Token</label>
<input id="new-token" readonly value="${flash.token}" spellcheck="false" data-testid="new-token">
<button type="button" data-copy="new-token">Copy</button> <span class="copied" aria-live="polite"></span>
<p><a href="/admin/pats">Done</a></p></div>`
          : html`<p>A token is shown only once, right after it is issued; it cannot be shown again. Rotate or issue a new one if it was lost.</p><p><a href="/admin/pats">Back to tokens</a></p>`,
        'pats',
      ),
    )
  })
  action('/admin/pats/:id/rotate', '/admin/pats', async (request, session) => {
    const hours = Number(request.body.graceHours || '0')
    if (!(Number.isInteger(hours) && hours >= 0 && hours <= 720)) {
      throw invalid('grace', 'whole hours from 0 to 720 (30 days)')
    }
    const { token, record, graceUntil } = await rotateTenantPat(op(request, session), {
      id: request.params.id as string,
      graceMs: hours * 3_600_000,
      lifetime: 'default',
    })
    const old =
      hours === 0
        ? 'the old token is refused now'
        : `the old token works until ${new Date(graceUntil).toISOString()}`
    await sessions.setFlash(session, {
      token,
      label: `${record.id} replacing ${request.params.id} (${old})`,
    })
    return '/admin/pats/issued'
  })
  action('/admin/pats/:id/revoke', '/admin/pats', async (request, session) => {
    const { record, changed } = await revokeTenantPat(
      op(request, session),
      request.params.id as string,
    )
    return changed
      ? `Revoked pat_…${record.last4} (${record.id}).`
      : `${record.id} was already revoked.`
  })
  action('/admin/pats/revoke-leaked', '/admin/pats', async (request, session) => {
    const [result] = await revokeLeakedPats(op(request, session), [
      (request.body.token ?? '').trim(),
    ])
    if (!result) return 'No token given.'
    const what = {
      revoked: 'revoked',
      already_revoked: 'was already revoked',
      unknown: 'is not known to this store',
      not_a_pat: 'is not a tokengate PAT',
    }[result.outcome]
    return `${result.fingerprint} ${what}.`
  })

  // Issuers
  view('/admin/issuers', async (_request, session) => {
    const health = new Map(ctx.issuers.keyStatus().map((s) => [s.issuer, s]))
    const issuers = (await store.listIssuers()).map((i) => issuerView(i, health.get(i.issuer)))
    return layout(
      'Trusted issuers',
      session,
      html`<table><caption>${issuers.length} issuers</caption><thead><tr><th scope="col">Issuer</th><th scope="col">Audiences</th><th scope="col">Key source</th><th scope="col">Keys</th><th scope="col">Last fetch</th><th scope="col">Key ids</th>${canWrite(session) ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
<tbody>${issuers.map(
        (
          i,
        ) => html`<tr><td>${i.issuer}</td><td>${i.audiences.join(', ')}</td><td>${i.keySource.kind}${'url' in i.keySource ? html`<br><small>${i.keySource.url}</small>` : ''}</td>
<td><span class="status status-${i.keys.state}">${i.keys.state}</span>${i.keys.failingSince ? html`<br><small>failing since ${time(Date.parse(i.keys.failingSince))}</small>` : ''}</td>
<td>${time(i.keys.lastFetchAt ? Date.parse(i.keys.lastFetchAt) : null, i.keys.state === 'static' ? 'static keys' : 'never')}</td>
<td>${i.keys.keyIds ? i.keys.keyIds.map((k) => k ?? '(no kid)').join(', ') : 'from the JWKS'}</td>
${
  canWrite(session)
    ? html`<td><form method="post" action="/admin/issuers/remove" data-confirm="Stop trusting ${i.issuer}? Its tokens get 401.">${csrfField(session)}<input type="hidden" name="issuer" value="${i.issuer}">
<button type="submit" class="danger" aria-label="Remove issuer ${i.issuer}">Remove</button></form></td>`
    : ''
}</tr>`,
      )}</tbody></table>
${
  canWrite(session)
    ? html`<details class="card"><summary>Add an issuer</summary><form method="post" action="/admin/issuers">${csrfField(session)}
<label for="iss">Issuer (exact iss)</label><input id="iss" name="issuer" required type="url">
<label for="aud">Audience</label><input id="aud" name="audience" required>
<label for="jwks">JWKS URL (empty: OpenID Connect discovery)</label><input id="jwks" name="jwksUrl" type="url">
<label for="tclaim">Tenant claim</label><input id="tclaim" name="tenantClaim" value="tenant_id">
<button type="submit">Add issuer</button></form></details>`
    : ''
}`,
      'issuers',
    )
  })
  action('/admin/issuers', '/admin/issuers', async (request, session) => {
    const b = request.body
    const { replaced } = await addIssuer(op(request, session), {
      issuer: b.issuer ?? '',
      audiences: [b.audience ?? ''],
      keySource: b.jwksUrl ? { kind: 'jwks_url', url: b.jwksUrl } : { kind: 'oidc_discovery' },
      tenant: { claim: b.tenantClaim || 'tenant_id' },
    })
    return `${replaced ? 'Replaced' : 'Added'} issuer ${b.issuer}.`
  })
  action('/admin/issuers/remove', '/admin/issuers', async (request, session) => {
    await removeIssuer(op(request, session), request.body.issuer ?? '')
    return `Removed issuer ${request.body.issuer}.`
  })

  // Audit log
  view('/admin/audit', async (request, session) => {
    const q = request.query as Query
    const { search, page: p } = auditQuery(q)
    const result = await store.admin.searchAudit(search, p)
    const filters = clean(q)
    delete filters.cursor
    const next = result.nextCursor
      ? `/admin/audit?${new URLSearchParams({ ...filters, cursor: result.nextCursor })}`
      : undefined
    const exportLink = (format: string) =>
      `/admin/audit/export?${new URLSearchParams({ ...filters, format })}`
    return layout(
      'Audit log',
      session,
      html`<form method="get" action="/admin/audit" class="card inline" role="search" aria-label="Filter events">
<div><label for="a-tenant">Tenant</label><input id="a-tenant" name="tenant" value="${q.tenant ?? ''}"></div>
<div><label for="a-type">Type</label><input id="a-type" name="type" placeholder="pat.revoked" value="${q.type ?? ''}"></div>
<div><label for="a-actor">Actor</label><input id="a-actor" name="actor" placeholder="admin:alice" value="${q.actor ?? ''}"></div>
<div><label for="a-since">Since (ISO)</label><input id="a-since" name="since" value="${q.since ?? ''}"></div>
<div><label for="a-until">Until (ISO)</label><input id="a-until" name="until" value="${q.until ?? ''}"></div>
<button type="submit">Filter</button></form>
<p class="toolbar"><a href="${exportLink('csv')}" download>Export CSV</a> <a href="${exportLink('json')}" download>Export JSON</a>
<label class="tail"><input type="checkbox" id="live-tail" data-feed="/admin/audit/feed?${new URLSearchParams(filters).toString()}"> Live tail</label>
<span id="tail-state" aria-live="polite"></span></p>
<table id="audit-table"><caption>Events, newest first</caption><thead><tr><th scope="col">Time</th><th scope="col">Type</th><th scope="col">Tenant</th><th scope="col">Actor</th><th scope="col">Outcome</th><th scope="col">Details</th></tr></thead>
<tbody>${result.items.map(
        (e) =>
          html`<tr data-event-id="${e.id}"><td>${time(e.time)}</td><td>${e.type}</td><td>${e.tenantId ?? '—'}</td><td>${e.actor ?? '—'}</td><td>${e.outcome}</td><td><code>${JSON.stringify(e.details)}</code></td></tr>`,
      )}</tbody></table>
${next ? html`<p><a href="${next}">Older events</a></p>` : ''}`,
      'audit',
    )
  })
  app.get('/admin/audit/feed', async (request, reply) => {
    const session = await sessionOf(request)
    if (!session) return reply.code(401).send({ events: [] })
    const q = request.query as Query
    const { search } = auditQuery({ ...q, since: q.after || q.since })
    const page = await store.admin.searchAudit(search, { limit: 100 })
    return { events: page.items.map(auditView) }
  })
  app.get('/admin/audit/export', async (request, reply) => {
    const session = await sessionOf(request)
    if (!session) return reply.redirect('/admin/sign-in', 303)
    const q = request.query as Query
    const events = await exportAudit(ctx, auditQuery(q).search)
    const csv = q.format !== 'json'
    reply.header(
      'content-disposition',
      `attachment; filename="tokengate-audit.${csv ? 'csv' : 'json'}"`,
    )
    if (csv) return reply.type('text/csv; charset=utf-8').send(auditCsv(events))
    return reply.type('application/json').send({ events: events.map(auditView) })
  })

  // Status
  view('/admin/status', async (_request, session) => {
    const s = await readStatus(ctx)
    return layout(
      'Status',
      session,
      html`<dl class="card status-list">
<dt>Overall</dt><dd><span class="status status-${s.status}">${s.status}</span></dd>
<dt>Store (${s.storeKind})</dt><dd>${s.store}</dd>
<dt>Change feed</dt><dd>${s.changeFeed.state}</dd>
<dt>Issuers with remote keys</dt><dd>${s.issuers.remote} (not loaded: ${s.issuers.notLoaded.join(', ') || 'none'}; stale: ${s.issuers.stale.join(', ') || 'none'})</dd>
<dt>Requests / s (5 min)</dt><dd>${s.rates.requestsPerSecond}</dd>
<dt>Failures / s (5 min)</dt><dd>${s.rates.failuresPerSecond}</dd>
</dl>
${trafficChart(ctx.traffic.buckets())}`,
      'status',
    )
  })
}

/** Query parameters with a value, for building links. */
function clean(query: Query): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(query)) if (value) out[key] = value
  return out
}
