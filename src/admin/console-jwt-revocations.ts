import {
  listJwtRevocations,
  removeJwtRevocation,
  revokeJwts,
} from '../auth/jwt-revocation-operations.ts'
import { OperationRefused } from '../auth/operations.ts'
import { JWT_REVOCATION_KINDS, type JwtRevocationKind } from '../core/jwt-revocations.ts'
import { counted } from '../core/operator-text.ts'
import { type ConsoleKit, EMPTY_FORM, type FormState, field, formError } from './console-kit.ts'
import { type Html, html, time } from './html.ts'
import type { Session } from './sessions.ts'

const KIND_LABELS: Readonly<Record<JwtRevocationKind, string>> = {
  jti: 'token id (jti)',
  sid: 'session (sid)',
  sub: 'subject (sub), issued before',
  tenant: 'tenant, issued before',
}

/**
 * JWT revocation rules (issue #34, docs/revoking-jwts.md): listed for every operator, made
 * and removed by the operator role. `?issuer=&kind=&value=` fills the form, so a subject or
 * session seen elsewhere links straight to revoking it.
 */
export function registerJwtRevocationPages(kit: ConsoleKit): void {
  const { ctx, view, action, layout, csrfField, canWrite, op } = kit

  const rulesPage = async (
    session: Session,
    form: FormState = EMPTY_FORM,
    prefill: Readonly<Record<string, string | undefined>> = {},
  ): Promise<Html> => {
    const rules = await listJwtRevocations({ store: ctx.store, clock: ctx.clock })
    const issuers = await ctx.store.listIssuers()
    const write = canWrite(session)
    const value = (name: string) => form.values[name] ?? prefill[name]
    const issuer = value('issuer')
    const kind = value('kind') ?? 'sub'
    return layout(
      'JWT revocations',
      session,
      html`<p class="help">Refuse an issuer's JWTs on every instance within a second, cached ones included: one token (jti), a session (sid), or a subject's or tenant's tokens issued before a time. A rule expires by itself once no token it matches can be valid.</p>
${
  write
    ? html`<form method="post" action="/admin/jwt-revocations" class="card" novalidate>${csrfField(session)}
${formError(form, ['issuer', 'kind', 'value', 'before', 'reason'])}
<div class="field"><label for="jr-issuer">Issuer</label><select id="jr-issuer" name="issuer">${issuers.map(
        (i) =>
          html`<option value="${i.issuer}" ${issuer === i.issuer ? html`selected` : ''}>${i.issuer}</option>`,
      )}</select></div>
<div class="field"><label for="jr-kind">Refuse by</label><select id="jr-kind" name="kind">${JWT_REVOCATION_KINDS.map(
        (k) =>
          html`<option value="${k}" ${kind === k ? html`selected` : ''}>${KIND_LABELS[k]}</option>`,
      )}</select></div>
${field({ label: 'Value', name: 'value', form, prefix: 'jr', current: prefill.value, required: true, attributes: html`autocomplete="off"` })}
${field({ label: 'Issued before (sub and tenant; ISO 8601, empty: now)', name: 'before', form, prefix: 'jr', attributes: html`autocomplete="off"` })}
${field({ label: 'Reason', name: 'reason', form, prefix: 'jr', attributes: html`maxlength="500" autocomplete="off"` })}
<button type="submit" class="danger">Revoke</button></form>`
    : ''
}
<div class="table-wrap"><table class="stack"><caption>${counted(rules.length, 'rule')}</caption><thead><tr><th scope="col">Rule</th><th scope="col">Refuses</th><th scope="col">Issued before</th><th scope="col">Expires</th><th scope="col">By</th>${write ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
<tbody>${rules.map(
        (
          r,
        ) => html`<tr data-rule-id="${r.id}"><td data-label="Rule"><span class="id">${r.id}</span>${r.reason ? html`<br><small>${r.reason}</small>` : ''}</td>
<td data-label="Refuses">${r.kind} <span class="id">${r.value}</span><br><small class="id">${r.issuer}</small></td>
<td data-label="Issued before">${time(r.issuedBefore, 'every token')}</td><td data-label="Expires">${time(r.expiresAt)}</td><td data-label="By" class="id">${r.createdBy ?? '-'}</td>
${
  write
    ? html`<td data-label="Actions"><form method="post" action="/admin/jwt-revocations/${r.id}/remove" data-confirm="Remove rule ${r.id}? Its tokens pass again.">${csrfField(session)}
<button type="submit" aria-label="Remove rule ${r.id}">Remove</button></form></td>`
    : ''
}</tr>`,
      )}</tbody></table></div>`,
      'issuers',
    )
  }

  view('/admin/jwt-revocations', (request, session) =>
    rulesPage(session, EMPTY_FORM, request.query as Record<string, string | undefined>),
  )
  action(
    '/admin/jwt-revocations',
    '/admin/jwt-revocations',
    async (request, session) => {
      const b = request.body
      const kind = (b.kind ?? '') as JwtRevocationKind
      const beforeText = (b.before ?? '').trim()
      const issuedBefore = beforeText === '' ? undefined : Date.parse(beforeText)
      if (issuedBefore !== undefined && Number.isNaN(issuedBefore)) {
        throw new OperationRefused(
          'invalid_input',
          'before',
          'before: an ISO 8601 time, or empty for now',
        )
      }
      const rule = await revokeJwts(
        op(request, session),
        {
          issuer: b.issuer ?? '',
          kind,
          value: (b.value ?? '').trim(),
          // An empty field is "now" for sub and tenant rules, and not given for jti and sid.
          issuedBefore,
          reason: (b.reason ?? '').trim() || undefined,
        },
        {
          maxLifetimeSec: ctx.config.auth.maxJwtLifetimeSec,
          clockToleranceSec: ctx.config.auth.clockToleranceSec,
          operatorIssuer: ctx.config.admin.oidc?.issuer,
        },
      )
      return `Revoked ${rule.kind} ${rule.value} of ${rule.issuer}: rule ${rule.id}.`
    },
    (_request, session, form) => rulesPage(session, form),
  )
  action(
    '/admin/jwt-revocations/:id/remove',
    '/admin/jwt-revocations',
    async (request, session) => {
      const removed = await removeJwtRevocation(op(request, session), request.params.id as string)
      return `Removed rule ${removed.id}: ${removed.kind} ${removed.value} of ${removed.issuer} passes again.`
    },
  )
}
