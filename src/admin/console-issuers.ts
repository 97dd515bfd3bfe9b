import { addIssuer, removeIssuer } from '../auth/issuer-operations.ts'
import { counted } from '../core/operator-text.ts'
import {
  type ConsoleKit,
  EMPTY_FORM,
  emptyState,
  type FormState,
  field,
  formError,
} from './console-kit.ts'
import { type Html, html, time } from './html.ts'
import type { Session } from './sessions.ts'
import { issuerView } from './views.ts'

/** Trusted issuers with their key sources' health; add and remove. */
export function registerIssuerPages(kit: ConsoleKit): void {
  const { ctx, view, action, layout, csrfField, canWrite, op } = kit

  const issuersPage = async (session: Session, form: FormState = EMPTY_FORM): Promise<Html> => {
    const health = new Map(ctx.issuers.keyStatus().map((s) => [s.issuer, s]))
    const issuers = (await ctx.store.listIssuers()).map((i) => issuerView(i, health.get(i.issuer)))
    const write = canWrite(session)
    return layout(
      'Trusted issuers',
      session,
      html`${
        issuers.length === 0
          ? emptyState({
              what: 'issuers',
              filters: [],
              clear: '/admin/issuers',
              none: 'No trusted issuers in the store: every JWT access token is refused until one is added (below, or with tokengate issuer add).',
            })
          : ''
      }<div class="table-wrap"${issuers.length === 0 ? html` hidden` : ''}><table class="stack"><caption>${counted(issuers.length, 'issuer')}</caption><thead><tr><th scope="col">Issuer</th><th scope="col">Audiences</th><th scope="col">Key source</th><th scope="col">Keys</th><th scope="col">Last fetch</th><th scope="col">Key ids</th>${write ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
<tbody>${issuers.map(
        (
          i,
        ) => html`<tr><td data-label="Issuer"><span class="id">${i.issuer}</span></td><td data-label="Audiences">${i.audiences.map((a) => html`<span class="id">${a}</span> `)}</td><td data-label="Key source">${i.keySource.kind}${'url' in i.keySource ? html`<br><small class="id">${i.keySource.url}</small>` : ''}</td>
<td data-label="Keys"><span class="status status-${i.keys.state}">${i.keys.state}</span>${i.keys.failingSince ? html`<br><small>failing since ${time(Date.parse(i.keys.failingSince))}</small>` : ''}</td>
<td data-label="Last fetch">${time(i.keys.lastFetchAt ? Date.parse(i.keys.lastFetchAt) : null, i.keys.state === 'static' ? 'static keys' : 'never')}</td>
<td data-label="Key ids">${i.keys.keyIds ? i.keys.keyIds.map((k) => html`<span class="id">${k ?? '(no kid)'}</span> `) : 'from the JWKS'}</td>
${
  write
    ? html`<td data-label="Actions"><form method="post" action="/admin/issuers/remove" data-confirm="Stop trusting ${i.issuer}? Its tokens get 401.">${csrfField(session)}<input type="hidden" name="issuer" value="${i.issuer}">
<button type="submit" class="danger" aria-label="Remove issuer ${i.issuer}">Remove</button></form></td>`
    : ''
}</tr>`,
      )}</tbody></table></div>
${
  write
    ? html`<details class="card" ${form.errors.length > 0 ? html`open` : ''}><summary>Add an issuer</summary><form method="post" action="/admin/issuers" novalidate>${csrfField(session)}
${formError(form, ['issuer', 'audience', 'jwksUrl', 'tenantClaim'])}
${field({ label: 'Issuer (exact iss)', name: 'issuer', form, prefix: 'iss', type: 'url', required: true })}
${field({ label: 'Audience', name: 'audience', form, prefix: 'iss', required: true })}
${field({ label: 'JWKS URL (empty: OpenID Connect discovery)', name: 'jwksUrl', form, prefix: 'iss', type: 'url' })}
${field({ label: 'Tenant claim', name: 'tenantClaim', form, prefix: 'iss', current: 'tenant_id' })}
<button type="submit">Add issuer</button></form></details>`
    : ''
}`,
      'issuers',
    )
  }

  view('/admin/issuers', (_request, session) => issuersPage(session))
  action(
    '/admin/issuers',
    '/admin/issuers',
    async (request, session) => {
      const b = request.body
      const { replaced } = await addIssuer(op(request, session), {
        issuer: b.issuer ?? '',
        audiences: [b.audience ?? ''],
        keySource: b.jwksUrl ? { kind: 'jwks_url', url: b.jwksUrl } : { kind: 'oidc_discovery' },
        tenant: { claim: b.tenantClaim || 'tenant_id' },
      })
      return `${replaced ? 'Replaced' : 'Added'} issuer ${b.issuer}.`
    },
    (_request, session, form) => issuersPage(session, form),
  )
  action('/admin/issuers/remove', '/admin/issuers', async (request, session) => {
    await removeIssuer(op(request, session), request.body.issuer ?? '')
    return `Removed issuer ${request.body.issuer}.`
  })
}
