import {
  checkExternalId,
  checkKeyName,
  checkKeyPermissions,
  checkMetadata,
  checkQuotaSpec,
  checkRateLimit,
  quotaView,
} from '../auth/key-fields.ts'
import {
  checkCertificateThumbprint,
  checkRotationGrace,
  editTenantPat,
  revokeLeakedPats,
  revokeTenantPat,
  rotateTenantPat,
  setPatDisabled,
} from '../auth/pat-lifecycle.ts'
import { readUsageSeries } from '../auth/usage.ts'
import { patStatus } from '../core/pat.ts'
import type { PatRecord } from '../core/ports.ts'
import { issuePat, lifetimeFrom, patQuery, rangeOf } from './api.ts'
import { usagePanel } from './chart.ts'
import {
  type ConsoleKit,
  checkFields,
  clean,
  EMPTY_FORM,
  emptyState,
  errorOf,
  type Form,
  type FormState,
  field,
  formError,
  type Query,
} from './console-kit.ts'
import { type Html, html, prettyJson, StatusPage, time } from './html.ts'
import { checkPermissions, checkTenantId, checkText, invalid, withinLimit } from './input.ts'
import { metadataFromForm, quotaFromForm, rateLimitFromForm } from './key-input.ts'
import type { Session } from './sessions.ts'

const STATUSES = ['', 'active', 'grace', 'rotated', 'expired', 'disabled', 'revoked']
const HOUR_MS = 3_600_000
const REFILLS = [
  ['none', 'never (uses in all)'],
  ['daily', 'every UTC day'],
  ['monthly', 'every UTC month'],
  ['interval', 'every N hours'],
] as const

const rateText = (limit: PatRecord['rateLimit']) =>
  limit ? `${limit.max} per ${limit.windowSec} s` : 'default'

/** The product fields of the issue and edit forms: rate limit, quota, metadata, external id. */
function productFields(form: FormState, record: PatRecord | undefined, prefix: string): Html {
  const quota = record?.quota
  const refill = form.values.quotaRefill ?? quota?.refill ?? 'none'
  const refillId = `${prefix}-quotaRefill`
  const refillError = errorOf(form, 'quotaRefill')
  const metadataError = errorOf(form, 'metadata')
  return html`<fieldset><legend>Own rate limit (empty: the default)</legend><div class="inline">
${field({ label: 'Requests', name: 'rateLimitMax', form, prefix, current: record?.rateLimit ? String(record.rateLimit.max) : '', attributes: html`inputmode="numeric"` })}
${field({ label: 'per window (seconds)', name: 'rateLimitWindowSec', form, prefix, current: record?.rateLimit ? String(record.rateLimit.windowSec) : '', attributes: html`inputmode="numeric"` })}
</div></fieldset>
<fieldset><legend>Quota of uses (empty: none)</legend><div class="inline">
${field({ label: 'Uses', name: 'quotaLimit', form, prefix, current: quota ? String(quota.limit) : '', attributes: html`inputmode="numeric"` })}
<div class="field${refillError ? ' invalid' : ''}"><label for="${refillId}">Refilled</label><select id="${refillId}" name="quotaRefill">${REFILLS.map(
    ([value, label]) =>
      html`<option value="${value}" ${refill === value ? html`selected` : ''}>${label}</option>`,
  )}</select>${refillError ? html`<p class="field-error">${refillError}</p>` : ''}</div>
${field({ label: 'N hours (interval)', name: 'quotaIntervalHours', form, prefix, current: quota?.intervalSec ? String(quota.intervalSec / 3600) : '', attributes: html`inputmode="numeric"` })}
</div></fieldset>
${field({ label: 'External id', name: 'externalId', form, prefix, current: record?.externalId ?? '', help: 'Your own id for the key (a customer or account); searchable.', attributes: html`maxlength="255"` })}
${field({ label: 'Bound client certificate (x5t#S256, empty: not bound)', name: 'certificateThumbprint', form, prefix, current: record?.certificateThumbprint ?? '', help: 'The base64url SHA-256 of the certificate (DER): the key is refused without that certificate (docs/certificate-binding.md).', attributes: html`maxlength="43" spellcheck="false"` })}
<div class="field${metadataError ? ' invalid' : ''}"><label for="${prefix}-metadata">Metadata (JSON object, at most 4096 bytes)</label>
<textarea id="${prefix}-metadata" name="metadata" rows="3" spellcheck="false" ${metadataError ? html`aria-invalid="true" aria-describedby="${prefix}-metadata-error"` : ''}>${form.values.metadata ?? (record?.metadata ? prettyJson(record.metadata) : '')}</textarea>
${metadataError ? html`<p id="${prefix}-metadata-error" class="field-error">${metadataError}</p>` : ''}</div>`
}

const PRODUCT_FIELDS = [
  'rateLimitMax',
  'rateLimitWindowSec',
  'quotaLimit',
  'quotaRefill',
  'quotaIntervalHours',
  'metadata',
  'externalId',
  'certificateThumbprint',
]

const ISSUE_FIELDS = [
  'tenantId',
  'subject',
  'name',
  'permissions',
  'expiresInDays',
  ...PRODUCT_FIELDS,
]

/**
 * The product fields read from a form and checked, each on its own, so that every refused
 * field is named at once; empty fields are the default (null).
 */
function productChecks(b: Form) {
  return {
    rateLimit: () => {
      const limit = rateLimitFromForm(b.rateLimitMax, b.rateLimitWindowSec)
      return limit && checkRateLimit(limit)
    },
    quota: () => {
      // Checked as a whole spec here; an edit without a refill keeps the key's own.
      const quota = quotaFromForm(b.quotaLimit, b.quotaRefill, b.quotaIntervalHours)
      if (quota) checkQuotaSpec({ ...quota, refill: quota.refill ?? 'none' })
      return quota
    },
    metadata: () => {
      const metadata = metadataFromForm(b.metadata)
      return metadata && (checkMetadata(metadata) as Record<string, unknown>)
    },
    externalId: () => {
      const id = (b.externalId ?? '').trim()
      return id === '' ? null : checkExternalId(id)
    },
    certificateThumbprint: () => {
      const thumbprint = (b.certificateThumbprint ?? '').trim()
      return thumbprint === '' ? null : checkCertificateThumbprint(thumbprint)
    },
  }
}

const EDIT_FIELDS = ['name', 'permissions', 'expiresAt', 'resetQuota', ...PRODUCT_FIELDS]

const limitsText = (r: PatRecord) => {
  const parts = [
    r.rateLimit ? `${r.rateLimit.max}/${r.rateLimit.windowSec}s` : '',
    r.quota
      ? `quota ${r.quota.limit} ${r.quota.refill === 'none' ? 'in all' : r.quota.refill}`
      : '',
  ].filter(Boolean)
  return parts.length > 0 ? parts.join(', ') : '—'
}

/**
 * A token's row: six columns, related facts stacked in one cell so that the actions fit
 * beside them at 1280 px; below 64rem the row becomes a labelled block (console.css).
 */
function keyRow(r: PatRecord, now: number, actions: Html | '' | undefined): Html {
  const status = patStatus(r, now)
  return html`<tr data-token-id="${r.id}"><td data-label="Token"><div><a href="/admin/pats/${r.id}"><code>pat_…${r.last4}</code></a>${r.name ? html`<br>${r.name}` : ''}<br><small class="id">${r.id}</small></div></td>
<td data-label="Tenant, subject"><div><span class="id">${r.tenantId}</span><br><span class="id">${r.subject}</span></div></td>
<td data-label="Permissions"><div>${r.permissions.join(' ') || '—'}</div></td>
<td data-label="Status, limits"><div><span class="status status-${status}">${status}</span><br><small>${limitsText(r)}</small></div></td>
<td data-label="Expires, used"><div><small>expires</small> ${time(r.expiresAt, 'never')}<br><small>used</small> ${time(r.lastUsedAt, 'never')}</div></td>
${actions === undefined ? '' : html`<td data-label="Actions" class="row-actions"><div>${actions}</div></td>`}</tr>`
}

/** The search fields in use, as (label, value) pairs for an empty state. */
function searchFilters(q: Query): [string, string][] {
  const labels: [keyof Query, string][] = [
    ['tenant', 'tenant'],
    ['subject', 'subject'],
    ['name', 'name'],
    ['externalId', 'external id'],
    ['last4', 'last 4'],
    ['status', 'status'],
    ['expiringWithinDays', 'expiring within (days)'],
  ]
  return labels.flatMap(([key, label]) => (q[key] ? [[label, q[key] as string]] : []))
}

/** Tokens: search, issue, revoke, rotate, leaked tokens; a key's page: edit, disable, usage. */
export function registerKeyPages(kit: ConsoleKit): void {
  const { app, ctx, view, action, layout, csrfField, canWrite, op, page, sessionOf } = kit
  const { store, clock } = ctx

  const listPage = async (q: Query, session: Session, form: FormState = EMPTY_FORM) => {
    const now = clock.now()
    const { search, status, page: p } = patQuery(q, now)
    const result = await store.admin.searchPats(search, p)
    const rows = result.items.filter((r) => status === undefined || patStatus(r, now) === status)
    const tenants = await store.listTenants()
    const next = result.nextCursor
      ? `/admin/pats?${new URLSearchParams({ ...clean(q), cursor: result.nextCursor })}`
      : undefined
    const write = canWrite(session)
    const issuing = form.errors.length > 0
    const chosenTenant = form.values.tenantId ?? q.tenant
    return layout(
      'Personal access tokens',
      session,
      html`<form method="get" action="/admin/pats" class="card inline" role="search" aria-label="Search tokens">
<div class="field"><label for="s-tenant">Tenant</label><input id="s-tenant" name="tenant" value="${q.tenant ?? ''}"></div>
<div class="field"><label for="s-subject">Subject</label><input id="s-subject" name="subject" value="${q.subject ?? ''}"></div>
<div class="field"><label for="s-name">Name</label><input id="s-name" name="name" value="${q.name ?? ''}"></div>
<div class="field"><label for="s-external">External id</label><input id="s-external" name="externalId" value="${q.externalId ?? ''}"></div>
<div class="field"><label for="s-last4">Last 4</label><input id="s-last4" name="last4" maxlength="4" size="4" value="${q.last4 ?? ''}"></div>
<div class="field"><label for="s-status">Status</label><select id="s-status" name="status">${STATUSES.map((s) => html`<option value="${s}" ${q.status === s ? html`selected` : ''}>${s || 'any'}</option>`)}</select></div>
<div class="field"><label for="s-exp">Expiring within (days)</label><input id="s-exp" name="expiringWithinDays" inputmode="numeric" size="4" value="${q.expiringWithinDays ?? ''}"></div>
<button type="submit">Search</button></form>
${
  write
    ? html`<details class="card" ${issuing ? html`open` : ''}><summary>Issue a token</summary>
<form method="post" action="/admin/pats" novalidate>${csrfField(session)}
${formError(form, ISSUE_FIELDS)}
<div class="field"><label for="i-tenantId">Tenant</label><select id="i-tenantId" name="tenantId" required>${tenants.filter((t) => t.enabled).map((t) => html`<option value="${t.id}" ${chosenTenant === t.id ? html`selected` : ''}>${t.id}</option>`)}</select></div>
${field({ label: 'Subject', name: 'subject', form, prefix: 'i', required: true, attributes: html`maxlength="255"` })}
${field({ label: 'Name', name: 'name', form, prefix: 'i', attributes: html`maxlength="100"` })}
${field({ label: 'Permissions (space-separated)', name: 'permissions', form, prefix: 'i', attributes: html`placeholder="tokens:read audit:read"` })}
${field({ label: `Expires in (days; empty = default${ctx.config.pat.maxExpiresInDays === 0 ? ', never = no expiry' : ''})`, name: 'expiresInDays', form, prefix: 'i' })}
${productFields(form, undefined, 'i')}
<button type="submit">Issue token</button></form></details>
<details class="card"><summary>Revoke a leaked token</summary>
<form method="post" action="/admin/pats/revoke-leaked" autocomplete="off">${csrfField(session)}
<label for="leak">Paste the leaked token (pat_…)</label><input id="leak" name="token" type="password" required spellcheck="false">
<button type="submit">Revoke leaked token</button></form></details>`
    : ''
}
${
  rows.length === 0
    ? emptyState({
        what: 'tokens',
        filters: searchFilters(q),
        clear: '/admin/pats',
        none: write
          ? 'No tokens yet. Issue one above, or with tokengate pat issue.'
          : 'No tokens yet. An operator issues them here or with tokengate pat issue.',
        more: next !== undefined,
      })
    : html`<div class="table-wrap"><table class="keys stack"><caption>Tokens${search.tenantId ? html` of ${search.tenantId}` : ''}</caption><thead><tr><th scope="col">Token</th><th scope="col">Tenant and subject</th><th scope="col">Permissions</th><th scope="col">Status and limits</th><th scope="col">Expires and last used</th>${write ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
<tbody>${rows.map((r) => keyRow(r, now, write ? rowActions(r, session) : undefined))}</tbody></table></div>`
}
${next ? html`<p><a href="${next}">Next page</a></p>` : ''}`,
      'pats',
    )
  }

  const rowActions = (r: PatRecord, session: Session) =>
    r.revokedAt === null
      ? html`<form method="post" action="/admin/pats/${r.id}/revoke" data-confirm="Revoke pat_…${r.last4}? Callers using it get 401 at once.">${csrfField(session)}
<button type="submit" class="danger" aria-label="Revoke token ${r.id}">Revoke</button></form>${
          r.supersededAt == null && r.disabledAt == null
            ? html`
<form method="post" action="/admin/pats/${r.id}/rotate">${csrfField(session)}
<label class="grace">grace (h) <input name="graceHours" value="0" size="3" inputmode="numeric" aria-label="Grace hours for ${r.id}"></label>
<button type="submit" aria-label="Rotate token ${r.id}">Rotate</button></form>`
            : ''
        }`
      : ''

  view('/admin/pats', (request, session) => listPage(request.query as Query, session))
  action(
    '/admin/pats',
    '/admin/pats',
    async (request, session) => {
      const b = request.body
      const product = checkFields(ISSUE_FIELDS, {
        tenantId: () => checkTenantId(b.tenantId ?? ''),
        subject: () => checkText(b.subject ?? '', 'subject', 255, true),
        name: () => checkText(b.name ?? '', 'name', 100),
        permissions: () => checkPermissions((b.permissions ?? '').split(/\s+/).filter(Boolean)),
        lifetime: () => lifetimeFrom(b.expiresInDays?.trim()),
        ...productChecks(b),
      })
      const { token, record } = await issuePat(op(request, session), {
        tenantId: product.tenantId,
        subject: product.subject,
        name: product.name,
        permissions: product.permissions,
        lifetime: product.lifetime,
        rateLimit: product.rateLimit ?? undefined,
        quota: product.quota ?? undefined,
        metadata: product.metadata ?? undefined,
        externalId: product.externalId ?? undefined,
        certificateThumbprint: product.certificateThumbprint ?? undefined,
      })
      await ctx.sessions.setFlash(session, {
        token,
        label: `${record.id} for ${record.subject} (tenant ${record.tenantId})`,
      })
      return '/admin/pats/issued'
    },
    (_request, session, form) => listPage({}, session, form),
  )
  app.get('/admin/pats/issued', async (request, reply) => {
    const session = await sessionOf(request)
    if (!session) return reply.redirect('/admin/sign-in', 303)
    // Shown once: taken from the store (sealed under the cookie) and cleared in one step.
    const flash = await ctx.sessions.takeFlash(session)
    const back = flash?.back ?? '/admin/pats'
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
<p><a href="${back}">Done</a></p></div>`
          : html`<p>A token is shown only once, right after it is issued; it cannot be shown again. Rotate or issue a new one if it was lost.</p><p><a href="/admin/pats">Back to tokens</a></p>`,
        'pats',
      ),
    )
  })
  action('/admin/pats/:id/rotate', '/admin/pats', async (request, session) => {
    const hours = Number(request.body.graceHours || '0')
    const graceMs = withinLimit(
      'grace',
      () => checkRotationGrace(Number.isInteger(hours) ? hours * HOUR_MS : Number.NaN),
      (maxMs) => `whole hours from 0 to ${maxMs / HOUR_MS} (${maxMs / (24 * HOUR_MS)} days)`,
    )
    const { token, record, graceUntil } = await rotateTenantPat(op(request, session), {
      id: request.params.id as string,
      graceMs,
      lifetime: 'default',
    })
    const old =
      hours === 0
        ? 'the old token is refused now'
        : `the old token works until ${new Date(graceUntil).toISOString()}`
    await ctx.sessions.setFlash(session, {
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

  const keyPage = async (
    id: string,
    query: Query,
    session: Session,
    form: FormState = EMPTY_FORM,
  ) => {
    const record = await store.getPat(id)
    if (!record) {
      return new StatusPage(
        404,
        layout(
          'No such token',
          session,
          html`<p>There is no token with this id: it may have been mistyped.</p><p><a href="/admin/pats">Back to tokens</a></p>`,
          'pats',
        ),
      )
    }
    const now = clock.now()
    const status = patStatus(record, now)
    const quota = record.quota ? await quotaView(store, record.quota, now) : null
    const series = await readUsageSeries(store, 'key', id, rangeOf(query), now)
    const write = canWrite(session) && record.revokedAt === null
    const base = `/admin/pats/${record.id}`
    return layout(
      `Token pat_…${record.last4}`,
      session,
      html`<dl class="card facts">
<dt>Id</dt><dd><code class="id">${record.id}</code></dd>
<dt>Status</dt><dd><span class="status status-${status}">${status}</span></dd>
<dt>Tenant</dt><dd><a href="/admin/tenants/${encodeURIComponent(record.tenantId)}">${record.tenantId}</a></dd>
<dt>Subject</dt><dd>${record.subject}</dd>
<dt>Name</dt><dd>${record.name || '—'}</dd>
<dt>Permissions</dt><dd>${record.permissions.join(' ') || '—'}</dd>
<dt>Created</dt><dd>${time(record.createdAt)}</dd>
<dt>Expires</dt><dd>${time(record.expiresAt, 'never')}</dd>
<dt>Last used</dt><dd>${time(record.lastUsedAt, 'never')}</dd>
<dt>Rate limit</dt><dd>${rateText(record.rateLimit)}</dd>
<dt>Quota</dt><dd>${quota ? html`${quota.remaining} of ${quota.limit} uses left${quota.resetsAt ? html`, refills ${time(Date.parse(quota.resetsAt))}` : ' (no refill)'}` : 'none'}</dd>
<dt>External id</dt><dd>${record.externalId ?? '—'}</dd>
<dt>Bound certificate</dt><dd>${record.certificateThumbprint ? html`<code>${record.certificateThumbprint}</code>` : 'none'}</dd>
<dt>Metadata</dt><dd>${record.metadata ? html`<pre>${prettyJson(record.metadata)}</pre>` : '—'}</dd>
</dl>
${
  write
    ? html`<div class="actions"><form method="post" action="${base}/${record.disabledAt == null ? 'disable' : 'enable'}" ${record.disabledAt == null ? html`data-confirm="Disable pat_…${record.last4}? Callers get 401 until it is enabled again."` : ''}>${csrfField(session)}
<button type="submit" ${record.disabledAt == null ? html`class="danger"` : ''}>${record.disabledAt == null ? 'Disable key' : 'Enable key'}</button></form></div>
<form method="post" action="${base}/edit" class="card" novalidate><h2>Edit</h2>${csrfField(session)}
${formError(form, EDIT_FIELDS)}
${field({ label: 'Name', name: 'name', form, prefix: 'e', current: record.name, attributes: html`maxlength="100"` })}
${field({ label: 'Permissions (space-separated)', name: 'permissions', form, prefix: 'e', current: record.permissions.join(' ') })}
${field({ label: 'Expires on (UTC date; empty: never)', name: 'expiresAt', form, prefix: 'e', type: 'date', current: record.expiresAt === null ? '' : new Date(record.expiresAt).toISOString().slice(0, 10), help: ctx.config.pat.maxExpiresInDays > 0 ? `At most ${ctx.config.pat.maxExpiresInDays} days after its creation.` : undefined })}
${productFields(form, record, 'e')}
<div class="field check"><input id="e-resetQuota" name="resetQuota" type="checkbox" value="1"><label for="e-resetQuota">Reset the quota's uses to zero</label></div>
<button type="submit">Save key</button></form>`
    : ''
}
<h2>Usage</h2>
${usagePanel(series, base, `Requests of pat_…${record.last4}`, `/admin/usage.csv?scope=key&id=${record.id}`)}`,
      'pats',
    )
  }

  view('/admin/pats/:id', (request, session) =>
    keyPage((request.params as { id: string }).id, request.query as Query, session),
  )
  action(
    '/admin/pats/:id/edit',
    (request) => `/admin/pats/${request.params.id}`,
    async (request, session) => {
      const b = request.body
      const id = request.params.id as string
      const current = await store.getPat(id)
      const expiresText = (b.expiresAt ?? '').trim()
      // Every field checked on its own first, so that all refused ones are marked at once.
      const { name, permissions, expiresAt, ...product } = checkFields(EDIT_FIELDS, {
        name: () => checkKeyName(b.name ?? ''),
        permissions: () => checkKeyPermissions((b.permissions ?? '').split(/\s+/).filter(Boolean)),
        expiresAt: (): number | 'never' => (expiresText === '' ? 'never' : endOfDay(expiresText)),
        ...productChecks(b),
      })
      const unchangedExpiry =
        current !== undefined &&
        (expiresAt === 'never'
          ? current.expiresAt === null
          : current.expiresAt !== null &&
            new Date(current.expiresAt).toISOString().slice(0, 10) === expiresText)
      const { changed, notes } = await editTenantPat(op(request, session), id, {
        name,
        permissions,
        expiresAt: unchangedExpiry ? undefined : expiresAt,
        ...product,
        resetQuotaUsage: b.resetQuota === '1',
      })
      return changed
        ? `Saved ${id}${notes.length > 0 ? ` (${notes.join('; ')})` : ''}.`
        : `${id}: nothing to change.`
    },
    (request, session, form) => keyPage(request.params.id as string, {}, session, form),
  )
  for (const [verb, disabled] of [
    ['disable', true],
    ['enable', false],
  ] as const) {
    action(
      `/admin/pats/:id/${verb}`,
      (request) => `/admin/pats/${request.params.id}`,
      async (request, session) => {
        const { record, changed, notes } = await setPatDisabled(
          op(request, session),
          request.params.id as string,
          disabled,
        )
        return changed
          ? `pat_…${record.last4} is now ${verb}d${notes.length > 0 ? ` (${notes.join('; ')})` : ''}.`
          : `pat_…${record.last4} was already ${verb}d.`
      },
    )
  }
}

/** The end of a UTC date typed into a date field (a key expiring "on" a day works all of it). */
function endOfDay(text: string): number {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(text))
    throw invalid('expiry', `${JSON.stringify(text)} is not a date (YYYY-MM-DD)`)
  const start = Date.parse(`${text}T00:00:00Z`)
  if (Number.isNaN(start))
    throw invalid('expiry', `${JSON.stringify(text)} is not a date (YYYY-MM-DD)`)
  return start + 86_400_000 - 1
}
