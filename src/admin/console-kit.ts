/**
 * What every console page module is handed (console.ts builds it): the page and action
 * helpers, the layout, and form fields that keep what the operator typed and show, beside the
 * field, the value that was refused and why.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { OperationRefused } from '../auth/operations.ts'
import type { PatOperationDeps } from '../auth/pat-lifecycle.ts'
import type { Store } from '../stores/store.ts'
import type { AdminContext } from './context.ts'
import { type Html, html } from './html.ts'
import type { Operator } from './operators.ts'
import type { Session } from './sessions.ts'

export type Form = Record<string, string | undefined>
export type Query = Record<string, string | undefined>
export type FormRequest = FastifyRequest<{ Body: Form; Params: Record<string, string> }>

/** One refusal of a form: the field it names (`form` for the form as a whole) and why. */
export interface FieldError {
  readonly field: string
  readonly message: string
}

/** A refused form: what was typed, and every refusal (each with the field it names). */
export interface FormState {
  readonly values: Form
  readonly errors: readonly FieldError[]
}

export const EMPTY_FORM: FormState = { values: {}, errors: [] }

/** The refusal of one field, if any. */
export function errorOf(form: FormState, name: string): string | undefined {
  return form.errors.find((e) => e.field === name)?.message
}

/**
 * Several refused fields of one form, refused together: an operator sees every field to fix
 * at once instead of one per submit. Its own message is the first refusal's.
 */
export class FormRefused extends OperationRefused {
  readonly errors: readonly FieldError[]
  constructor(errors: readonly FieldError[], first: OperationRefused) {
    super(first.code, first.subject, first.message)
    this.errors = errors
  }
}

/**
 * Runs each check on its own and collects every refusal: none, the values; any, a
 * `FormRefused` naming them all. A refusal marks the form field its subject names when that is
 * one of `fields` (a quota check may refuse the limit or the interval), else the check's key.
 * A check that throws something else is a bug and is thrown.
 */
export function checkFields<T extends Record<string, () => unknown>>(
  fields: readonly string[],
  checks: T,
): { [K in keyof T]: ReturnType<T[K]> } {
  const values: Record<string, unknown> = {}
  const errors: FieldError[] = []
  let first: OperationRefused | undefined
  for (const [name, check] of Object.entries(checks)) {
    try {
      values[name] = check()
    } catch (error) {
      if (!(error instanceof OperationRefused)) throw error
      first ??= error
      const field = fieldOf(error.subject)
      errors.push({ field: fields.includes(field) ? field : name, message: error.message })
    }
  }
  if (first) throw new FormRefused(errors, first)
  return values as { [K in keyof T]: ReturnType<T[K]> }
}

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
  /** Opens a session for a verified operator (ending the browser's old one) and sets its cookie. */
  startSession(request: FastifyRequest, reply: FastifyReply, operator: Operator): Promise<Session>
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
  'certificate thumbprint': 'certificateThumbprint',
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
  const error = errorOf(options.form, options.name)
  const value = options.form.values[options.name] ?? options.current ?? ''
  const described = [options.help ? `${id}-help` : '', error ? `${id}-error` : '']
    .filter(Boolean)
    .join(' ')
  return html`<div class="field${error ? ' invalid' : ''}"><label for="${id}">${options.label}</label>
<input id="${id}" name="${options.name}" type="${options.type ?? 'text'}" value="${value}" ${options.required ? html`required` : ''} ${error ? html`aria-invalid="true"` : ''} ${described ? html`aria-describedby="${described}"` : ''} ${options.attributes ?? ''}>
${options.help ? html`<p id="${id}-help" class="help">${options.help}</p>` : ''}
${error ? html`<p id="${id}-error" class="field-error">${error}</p>` : ''}</div>`
}

/**
 * Atop a refused form: refusals that name no field of this form, as they are, or how many
 * marked fields need a change (each is marked beside its input).
 */
export function formError(form: FormState, fields: readonly string[]): Html {
  if (form.errors.length === 0) return html``
  const loose = form.errors.filter((e) => !fields.includes(e.field))
  if (loose.length > 0) {
    return html`<p class="notice error" role="alert">${loose.map((e, i) => html`${i > 0 ? ' ' : ''}${e.message}`)}</p>`
  }
  const marked = form.errors.length
  return html`<p class="notice error" role="alert">${
    marked === 1
      ? 'Not saved: see the marked field.'
      : `Not saved: ${marked} fields need a change; each is marked below.`
  }</p>`
}

/** Query parameters with a value, for building links. */
export function clean(query: Query): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(query)) if (value) out[key] = value
  return out
}

export interface EmptyStateOptions {
  /** What the table lists, plural: `tokens`, `audit events`. */
  readonly what: string
  /** The filters in use, as (label, value) pairs; none: the list itself is empty. */
  readonly filters: readonly (readonly [string, string])[]
  /** The unfiltered page. */
  readonly clear: string
  /** What to say when nothing exists yet, and how to make the first one. */
  readonly none: string
  /** Whether later pages exist (a filter applied per page may leave this one empty). */
  readonly more?: boolean
}

/**
 * An empty list says what is empty and why: nothing matches these filters (named, with a way
 * to clear them), or nothing exists yet (with how to make the first).
 */
export function emptyState(options: EmptyStateOptions): Html {
  if (options.filters.length === 0) {
    return html`<p class="empty" data-testid="empty">${options.none}</p>`
  }
  const matched = options.filters.map(
    ([label, value], i) => html`${i > 0 ? ', ' : ''}${label} “${value}”`,
  )
  const where = options.more ? ' on this page' : ''
  return html`<p class="empty" data-testid="empty">No ${options.what}${where} match ${matched}. <a href="${options.clear}">Clear the search</a> to see every ${options.what.replace(/s$/, '')}.</p>`
}
