/**
 * What every console page module is handed (console.ts builds it): the page and action
 * helpers, the layout, and form fields that keep what the operator typed and show, beside the
 * field, the value that was refused and why.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { PatOperationDeps } from '../auth/pat-lifecycle.ts'
import type { Store } from '../stores/store.ts'
import type { AdminContext } from './context.ts'
import { type Html, html } from './html.ts'
import type { Session } from './sessions.ts'

export type Form = Record<string, string | undefined>
export type Query = Record<string, string | undefined>
export type FormRequest = FastifyRequest<{ Body: Form; Params: Record<string, string> }>

/** A refused form: what was typed, and the refusal (with the field it names). */
export interface FormState {
  readonly values: Form
  readonly error: { readonly field: string; readonly message: string } | undefined
}

export const EMPTY_FORM: FormState = { values: {}, error: undefined }

export interface ConsoleKit {
  readonly app: FastifyInstance
  readonly ctx: AdminContext
  /** A read page for signed-in operators (others go to sign-in). */
  view(path: string, render: (request: FastifyRequest, session: Session) => Promise<Html>): void
  /**
   * A write: same origin, a form body, a valid CSRF token, the operator role; then `run`,
   * a notice, and a 303 to `back` (or to the path `run` returns). With `rerender`, a refusal
   * answers the form page again (400, 404 or 409) with what was typed and the refused field
   * marked, instead of redirecting away from the input.
   */
  action(
    path: string,
    back: string | ((request: FormRequest) => string),
    run: (request: FormRequest, session: Session) => Promise<string>,
    rerender?: (request: FormRequest, session: Session, form: FormState) => Promise<Html>,
  ): void
  layout(title: string, session: Session | undefined, content: Html, current?: string): Html
  csrfField(session: Session): Html
  canWrite(session: Session): boolean
  op(request: FastifyRequest, session: Session): PatOperationDeps & { readonly store: Store }
  page(reply: FastifyReply, status: number, body: Html): FastifyReply
  sessionOf(request: FastifyRequest): Promise<Session | undefined>
}

/** The form field a refusal's subject names (OperationRefused.subject), for marking it. */
const FIELD_OF_SUBJECT: Readonly<Record<string, string>> = {
  'tenant id': 'id',
  id: 'id',
  name: 'name',
  subject: 'subject',
  permission: 'permissions',
  permissions: 'permissions',
  expiry: 'expiresAt',
  expiresInDays: 'expiresInDays',
  lifetime: 'expiresInDays',
  'rate limit': 'rateLimitMax',
  'rate limit window': 'rateLimitWindowSec',
  quota: 'quotaLimit',
  'quota refill': 'quotaRefill',
  'quota interval': 'quotaIntervalHours',
  'quota interval (hours)': 'quotaIntervalHours',
  metadata: 'metadata',
  'external id': 'externalId',
  externalId: 'externalId',
  role: 'role',
  issuer: 'issuer',
  audiences: 'audience',
}

/** The field of a refusal: the one its subject names, else the form as a whole. */
export function fieldOf(subject: string): string {
  return FIELD_OF_SUBJECT[subject] ?? 'form'
}

export interface FieldOptions {
  readonly label: string
  readonly name: string
  readonly form: FormState
  /** The value shown when the form was not submitted (the record's current value). */
  readonly current?: string | undefined
  readonly type?: string
  readonly help?: string | undefined
  readonly required?: boolean
  readonly attributes?: Html
  /** Namespace of the element ids, when a page has several forms. */
  readonly prefix?: string
}

/**
 * A labelled input keeping what was typed (or the current value), marked invalid with the
 * refusal beside it when the refusal names this field.
 */
export function field(options: FieldOptions): Html {
  const id = `${options.prefix ?? 'f'}-${options.name}`
  const error = options.form.error?.field === options.name ? options.form.error.message : undefined
  const value = options.form.values[options.name] ?? options.current ?? ''
  const described = [options.help ? `${id}-help` : '', error ? `${id}-error` : '']
    .filter(Boolean)
    .join(' ')
  return html`<div class="field${error ? ' invalid' : ''}"><label for="${id}">${options.label}</label>
<input id="${id}" name="${options.name}" type="${options.type ?? 'text'}" value="${value}" ${options.required ? html`required` : ''} ${error ? html`aria-invalid="true"` : ''} ${described ? html`aria-describedby="${described}"` : ''} ${options.attributes ?? ''}>
${options.help ? html`<p id="${id}-help" class="help">${options.help}</p>` : ''}
${error ? html`<p id="${id}-error" class="field-error">${error}</p>` : ''}</div>`
}

/** A form-level refusal (one that names no field of this form), as an alert atop the form. */
export function formError(form: FormState, fields: readonly string[]): Html {
  const error = form.error
  if (!error || fields.includes(error.field)) {
    return error
      ? html`<p class="notice error" role="alert">Not saved: see the marked field.</p>`
      : html``
  }
  return html`<p class="notice error" role="alert">${error.message}</p>`
}

/** Query parameters with a value, for building links. */
export function clean(query: Query): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(query)) if (value) out[key] = value
  return out
}
