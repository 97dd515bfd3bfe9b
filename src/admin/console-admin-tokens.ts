import {
  adminTokenStatus,
  MAX_ADMIN_TOKEN_LIFETIME_DAYS,
  revokeAdminToken,
} from '../auth/admin-tokens.ts'
import { counted } from '../core/operator-text.ts'
import { issueAdminTokenFrom } from './api.ts'
import { type ConsoleKit, EMPTY_FORM, type FormState, field, formError } from './console-kit.ts'
import { type Html, html, time } from './html.ts'
import type { Session } from './sessions.ts'

/** Admin tokens: listed for every operator; issued and revoked by the operator role. */
export function registerAdminTokenPages(kit: ConsoleKit): void {
  const { ctx, view, action, layout, csrfField, canWrite, op } = kit

  const tokensPage = async (session: Session, form: FormState = EMPTY_FORM): Promise<Html> => {
    const now = ctx.clock.now()
    const tokens = await ctx.store.admin.listAdminTokens()
    const write = canWrite(session)
    const role = form.values.role ?? 'read-only'
    return layout(
      'Admin tokens',
      session,
      html`<p class="help">Operator credentials for this console and the admin API (not API tokens). Each one expires; its holder's name is the actor of every change they make.</p>
${
  write
    ? html`<form method="post" action="/admin/admin-tokens" class="card inline" novalidate>${csrfField(session)}
${formError(form, ['name', 'role', 'expiresInDays'])}
${field({ label: 'Holder (name)', name: 'name', form, prefix: 'adm', required: true, attributes: html`maxlength="100" autocomplete="off"` })}
<div class="field"><label for="adm-role">Role</label><select id="adm-role" name="role">${[
        'read-only',
        'operator',
      ].map(
        (r) => html`<option value="${r}" ${role === r ? html`selected` : ''}>${r}</option>`,
      )}</select></div>
${field({ label: `Expires in (days, at most ${MAX_ADMIN_TOKEN_LIFETIME_DAYS})`, name: 'expiresInDays', form, prefix: 'adm', current: '30', attributes: html`inputmode="numeric"` })}
<button type="submit">Issue admin token</button></form>`
    : ''
}
<div class="table-wrap"><table class="stack"><caption>${counted(tokens.length, 'admin token')}</caption><thead><tr><th scope="col">Token</th><th scope="col">Holder</th><th scope="col">Role</th><th scope="col">Status</th><th scope="col">Created</th><th scope="col">Expires</th>${write ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
<tbody>${tokens.map((t) => {
        const status = adminTokenStatus(t, now)
        return html`<tr data-admin-token-id="${t.id}"><td data-label="Token"><code>tga_…${t.last4}</code><br><small class="id">${t.id}</small></td><td data-label="Holder" class="id">${t.name}</td><td data-label="Role" class="id">${t.role}</td>
<td data-label="Status"><span class="status status-${status}">${status}</span></td><td data-label="Created">${time(t.createdAt)}</td><td data-label="Expires">${time(t.expiresAt)}</td>
${
  write
    ? html`<td data-label="Actions">${
        t.revokedAt === null
          ? html`<form method="post" action="/admin/admin-tokens/${t.id}/revoke" data-confirm="Revoke tga_…${t.last4} of ${t.name}? Their sessions end.">${csrfField(session)}
<button type="submit" class="danger" aria-label="Revoke admin token ${t.id}">Revoke</button></form>`
          : ''
      }</td>`
    : ''
}</tr>`
      })}</tbody></table></div>`,
      'admin-tokens',
    )
  }

  view('/admin/admin-tokens', (_request, session) => tokensPage(session))
  action(
    '/admin/admin-tokens',
    '/admin/admin-tokens',
    async (request, session) => {
      const b = request.body
      const { token, record } = await issueAdminTokenFrom(op(request, session), {
        name: (b.name ?? '').trim(),
        role: b.role ?? '',
        expiresInDays: (b.expiresInDays ?? '').trim() || '30',
      })
      await ctx.sessions.setFlash(session, {
        token,
        label: `${record.id} for ${record.name} (${record.role})`,
        back: '/admin/admin-tokens',
      })
      return '/admin/pats/issued'
    },
    (_request, session, form) => tokensPage(session, form),
  )
  action('/admin/admin-tokens/:id/revoke', '/admin/admin-tokens', async (request, session) => {
    const { record, changed } = await revokeAdminToken(
      op(request, session),
      request.params.id as string,
    )
    return changed
      ? `Revoked admin token of ${record.name} (${record.id}).`
      : `${record.id} was already revoked.`
  })
}
