import { editTenant, setTenantEnabled } from '../auth/tenant-operations.ts'
import { readUsageSeries, usageRange } from '../auth/usage.ts'
import { counted } from '../core/operator-text.ts'
import type { Tenant } from '../core/ports.ts'
import { createNamedTenant, rangeOf } from './api.ts'
import { usagePanel } from './chart.ts'
import {
  type ConsoleKit,
  EMPTY_FORM,
  emptyState,
  type FormState,
  field,
  formError,
  type Query,
} from './console-kit.ts'
import { type Html, html, StatusPage, time } from './html.ts'
import { rateLimitFromForm } from './key-input.ts'
import type { Session } from './sessions.ts'

const rateText = (limit: Tenant['rateLimit']) =>
  limit ? `${limit.max} per ${limit.windowSec} s` : 'default'

/** Tenants: the list with create, enable and disable; a tenant's page with its usage. */
export function registerTenantPages(kit: ConsoleKit): void {
  const { ctx, view, action, layout, csrfField, canWrite, op } = kit
  const { store, clock } = ctx

  const listPage = async (session: Session, form: FormState = EMPTY_FORM): Promise<Html> => {
    const tenants = await store.listTenants()
    const write = canWrite(session)
    return layout(
      'Tenants',
      session,
      html`${
        write
          ? html`<form method="post" action="/admin/tenants" class="card inline" novalidate>${csrfField(session)}
${formError(form, ['id', 'name'])}
${field({ label: 'Tenant id', name: 'id', form, prefix: 'tenant', required: true, attributes: html`maxlength="64" autocomplete="off"` })}
${field({ label: 'Name', name: 'name', form, prefix: 'tenant', attributes: html`maxlength="200"` })}
<button type="submit">Create tenant</button></form>`
          : ''
      }
${
  tenants.length === 0
    ? emptyState({
        what: 'tenants',
        filters: [],
        clear: '/admin/tenants',
        none: write
          ? 'No tenants yet: every token belongs to one. Create the first above, or with tokengate tenant create.'
          : 'No tenants yet: every token belongs to one. An operator creates them here or with tokengate tenant create.',
      })
    : ''
}<div class="table-wrap"${tenants.length === 0 ? html` hidden` : ''}><table class="stack"><caption>${counted(tenants.length, 'tenant')}</caption><thead><tr><th scope="col">Id</th><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Rate limit</th><th scope="col">Created</th>${write ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
<tbody>${tenants.map(
        (
          t,
        ) => html`<tr><td data-label="Id"><a class="id" href="/admin/tenants/${encodeURIComponent(t.id)}">${t.id}</a></td><td data-label="Name">${t.name}</td>
<td data-label="Status">${t.enabled ? 'enabled' : html`<strong>disabled</strong>`}</td><td data-label="Rate limit">${rateText(t.rateLimit)}</td><td data-label="Created">${time(t.createdAt)}</td>
${write ? html`<td data-label="Actions">${enableButton(t, session)}</td>` : ''}</tr>`,
      )}</tbody></table></div>`,
      'tenants',
    )
  }

  const enableButton = (t: Tenant, session: Session) =>
    html`<form method="post" action="/admin/tenants/${encodeURIComponent(t.id)}/${t.enabled ? 'disable' : 'enable'}">${csrfField(session)}
<button type="submit" aria-label="${t.enabled ? 'Disable' : 'Enable'} tenant ${t.id}">${t.enabled ? 'Disable' : 'Enable'}</button></form>`

  view('/admin/tenants', (_request, session) => listPage(session))
  action(
    '/admin/tenants',
    '/admin/tenants',
    async (request, session) => {
      const tenant = await createNamedTenant(
        op(request, session),
        request.body.id ?? '',
        request.body.name,
      )
      return `Created tenant ${tenant.id}.`
    },
    (_request, session, form) => listPage(session, form),
  )
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

  const detailPage = async (
    id: string,
    query: Query,
    session: Session,
    form: FormState = EMPTY_FORM,
  ): Promise<Html> => {
    const tenant = await store.findTenant(id)
    if (!tenant) {
      return new StatusPage(
        404,
        layout(
          'No such tenant',
          session,
          html`<p>There is no tenant with this id: it may have been mistyped.</p><p><a href="/admin/tenants">Back to tenants</a></p>`,
          'tenants',
        ),
      )
    }
    const now = clock.now()
    const range = rangeOf(query)
    const series = await readUsageSeries(store, 'tenant', id, range, now)
    const { resolution, since, until } = usageRange(range, now)
    const top = await store.topKeys(id, resolution, since, until, 10)
    const base = `/admin/tenants/${encodeURIComponent(id)}`
    const write = canWrite(session)
    return layout(
      `Tenant ${tenant.id}`,
      session,
      html`<dl class="card facts">
<dt>Name</dt><dd>${tenant.name}</dd>
<dt>Status</dt><dd>${tenant.enabled ? 'enabled' : html`<strong>disabled</strong>`}</dd>
<dt>Rate limit</dt><dd>${rateText(tenant.rateLimit)} <span class="help">(across all its tokens; the default is ${ctx.config.rateLimit.perTenant.max} per ${ctx.config.rateLimit.perTenant.windowSec} s)</span></dd>
<dt>Created</dt><dd>${time(tenant.createdAt)}</dd>
<dt>Tokens</dt><dd><a href="/admin/pats?tenant=${encodeURIComponent(id)}">Tokens of ${id}</a></dd>
</dl>
${write ? html`<div class="actions">${enableButton(tenant, session)}</div>` : ''}
${
  write
    ? html`<form method="post" action="${base}/edit" class="card" novalidate><h2>Edit</h2>${csrfField(session)}
${formError(form, ['name', 'rateLimitMax', 'rateLimitWindowSec'])}
${field({ label: 'Name', name: 'name', form, current: tenant.name, required: true, attributes: html`maxlength="200"` })}
<fieldset><legend>Own rate limit (empty: the default)</legend><div class="inline">
${field({ label: 'Requests', name: 'rateLimitMax', form, current: tenant.rateLimit ? String(tenant.rateLimit.max) : '', attributes: html`inputmode="numeric"` })}
${field({ label: 'per window (seconds)', name: 'rateLimitWindowSec', form, current: tenant.rateLimit ? String(tenant.rateLimit.windowSec) : '', attributes: html`inputmode="numeric"` })}
</div></fieldset>
<button type="submit">Save tenant</button></form>`
    : ''
}
<h2>Usage</h2>
${usagePanel(series, base, `Requests of tenant ${id}`, `/admin/usage.csv?scope=tenant&id=${encodeURIComponent(id)}`)}
<div class="table-wrap"><table><caption>Busiest keys, same period</caption><thead><tr><th scope="col">Key</th><th scope="col">Allowed</th><th scope="col">401</th><th scope="col">403</th><th scope="col">429</th></tr></thead>
<tbody>${top.map(
        (k) =>
          html`<tr><td><a class="id" href="/admin/pats/${k.tokenId}">${k.tokenId}</a></td><td>${k.allowed}</td><td>${k.unauthorized}</td><td>${k.forbidden}</td><td>${k.limited}</td></tr>`,
      )}</tbody></table></div>`,
      'tenants',
    )
  }

  view('/admin/tenants/:id', (request, session) =>
    detailPage((request.params as { id: string }).id, request.query as Query, session),
  )
  action(
    '/admin/tenants/:id/edit',
    (request) => `/admin/tenants/${encodeURIComponent(request.params.id as string)}`,
    async (request, session) => {
      const id = request.params.id as string
      const { changed } = await editTenant(op(request, session), id, {
        name: request.body.name ?? '',
        rateLimit: rateLimitFromForm(request.body.rateLimitMax, request.body.rateLimitWindowSec),
      })
      return changed ? `Saved tenant ${id}.` : `Tenant ${id}: nothing to change.`
    },
    (request, session, form) => detailPage(request.params.id as string, {}, session, form),
  )
}
