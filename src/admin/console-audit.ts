import { AUDIT_EVENT_TYPES } from '../auth/audit-events.ts'
import type { StoredAuditEvent } from '../stores/store.ts'
import { auditQuery, exportAudit } from './api.ts'
import { type ConsoleKit, clean, emptyState, type Query } from './console-kit.ts'
import { type Html, html, time } from './html.ts'
import { auditCsv, auditView } from './views.ts'

const DATE = /^\d{4}-\d{2}-\d{2}$/

/**
 * The audit filters of the console's query: a date picker's `until` (a day) includes that
 * whole day, so it becomes the start of the next one; times given in full pass as they are.
 */
function searchOf(q: Query) {
  const until = q.until && DATE.test(q.until) ? nextDay(q.until) : q.until
  return auditQuery({ ...q, until })
}

function nextDay(date: string): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + 86_400_000).toISOString()
}

/** An event's details as a short list of fields; an edit's before/after as changes. */
export function detailsView(details: Readonly<Record<string, unknown>>): Html {
  const { before, after, ...rest } = details as {
    before?: Record<string, unknown>
    after?: Record<string, unknown>
  } & Record<string, unknown>
  const changes =
    before && after
      ? Object.keys({ ...before, ...after }).map(
          (key) =>
            html`<li><span class="k">${key}</span> ${valueText(before[key])} → ${valueText(after[key])}</li>`,
        )
      : []
  const fields = Object.entries(rest).map(
    ([key, value]) => html`<li><span class="k">${key}</span> ${valueText(value)}</li>`,
  )
  if (changes.length + fields.length === 0) return html`—`
  return html`<ul class="details">${fields}${changes}</ul>`
}

function valueText(value: unknown): string {
  if (value === null || value === undefined) return '—'
  if (Array.isArray(value)) return value.length === 0 ? '(none)' : value.map(valueText).join(', ')
  if (typeof value === 'object') return JSON.stringify(value)
  return String(value)
}

/** The audit log: a table with a type picker, date pickers, paging, export and a live tail. */
export function registerAuditPages(kit: ConsoleKit): void {
  const { app, ctx, view, layout, sessionOf } = kit
  const { store } = ctx

  view('/admin/audit', async (request, session) => {
    const q = request.query as Query
    const { search, page: p } = searchOf(q)
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
<div class="field"><label for="a-tenant">Tenant</label><input id="a-tenant" name="tenant" value="${q.tenant ?? ''}"></div>
<div class="field"><label for="a-type">Type</label><select id="a-type" name="type"><option value="">any</option>${AUDIT_EVENT_TYPES.map(
        (type) =>
          html`<option value="${type}" ${q.type === type ? html`selected` : ''}>${type}</option>`,
      )}</select></div>
<div class="field"><label for="a-actor">Actor</label><input id="a-actor" name="actor" placeholder="admin:alice" value="${q.actor ?? ''}"></div>
<div class="field"><label for="a-since">From (UTC day)</label><input id="a-since" name="since" type="date" value="${q.since ?? ''}"></div>
<div class="field"><label for="a-until">To (UTC day, included)</label><input id="a-until" name="until" type="date" value="${q.until ?? ''}"></div>
<button type="submit">Filter</button></form>
<p class="toolbar"><a href="${exportLink('csv')}" download>Export CSV</a> <a href="${exportLink('json')}" download>Export JSON</a>
<label class="tail"><input type="checkbox" id="live-tail" data-feed="/admin/audit/feed?${new URLSearchParams(filters).toString()}"> Live tail</label>
<span id="tail-state" aria-live="polite"></span></p>
<div class="table-wrap"><table id="audit-table" class="audit"><caption>Events, newest first</caption><thead><tr><th scope="col">Time</th><th scope="col">Type</th><th scope="col">Tenant</th><th scope="col">Actor</th><th scope="col">Outcome</th><th scope="col">Details</th></tr></thead>
<tbody>${result.items.map(eventRow)}</tbody></table></div>
${
  result.items.length === 0
    ? emptyState({
        what: 'audit events',
        filters: auditFilters(q),
        clear: '/admin/audit',
        none: 'No audit events yet: every sign-in refusal, issue, edit and revocation is recorded here as it happens.',
      })
    : ''
}
${next ? html`<p><a href="${next}">Older events</a></p>` : ''}`,
      'audit',
    )
  })
  app.get('/admin/audit/feed', async (request, reply) => {
    const session = await sessionOf(request)
    if (!session) return reply.code(401).send({ events: [] })
    const q = request.query as Query
    const { search } = searchOf({ ...q, since: q.after || q.since })
    const page = await store.admin.searchAudit(search, { limit: 100 })
    return { events: page.items.map(auditView) }
  })
  app.get('/admin/audit/export', async (request, reply) => {
    const session = await sessionOf(request)
    if (!session) return reply.redirect('/admin/sign-in', 303)
    const q = request.query as Query
    const events = await exportAudit(ctx, searchOf(q).search)
    const csv = q.format !== 'json'
    reply.header(
      'content-disposition',
      `attachment; filename="tokengate-audit.${csv ? 'csv' : 'json'}"`,
    )
    if (csv) return reply.type('text/csv; charset=utf-8').send(auditCsv(events))
    return reply.type('application/json').send({ events: events.map(auditView) })
  })
}

/** The audit filters in use, as (label, value) pairs for an empty state. */
function auditFilters(q: Query): [string, string][] {
  const labels: [string, string][] = [
    ['tenant', 'tenant'],
    ['type', 'type'],
    ['actor', 'actor'],
    ['since', 'from'],
    ['until', 'to'],
  ]
  return labels.flatMap(([key, label]) => (q[key] ? [[label, q[key] as string]] : []))
}

function eventRow(e: StoredAuditEvent): Html {
  return html`<tr data-event-id="${e.id}"><td data-label="Time">${time(e.time)}</td><td data-label="Type"><code>${e.type}</code></td><td data-label="Tenant" class="id">${e.tenantId ?? '—'}</td><td data-label="Actor" class="id">${e.actor ?? '—'}</td><td data-label="Outcome"><code>${e.outcome}</code></td><td data-label="Details">${detailsView(e.details)}</td></tr>`
}
