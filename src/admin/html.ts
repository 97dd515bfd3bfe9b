/**
 * Server-rendered HTML with escaping by default: every interpolated value is escaped unless
 * it is a `Html` fragment built by this module. Nothing from a request or the store reaches
 * a page unescaped, and no page carries inline script (the CSP forbids it).
 */
export class Html {
  readonly text: string
  constructor(text: string) {
    this.text = text
  }
  toString(): string {
    return this.text
  }
}

/** A page with a status other than 200 (a console page about something that does not exist). */
export class StatusPage extends Html {
  readonly status: number
  constructor(status: number, page: Html) {
    super(page.text)
    this.status = status
  }
}

const ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
}

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ESCAPES[c] as string)
}

type Part = Html | string | number | boolean | null | undefined | readonly Part[]

function render(part: Part): string {
  if (part === null || part === undefined || part === false) return ''
  if (part instanceof Html) return part.text
  if (Array.isArray(part)) return part.map(render).join('')
  return escapeHtml(String(part))
}

/** Tagged template: `html\`<p>${name}</p>\`` escapes `name`; nested `html` stays as is. */
export function html(strings: TemplateStringsArray, ...values: Part[]): Html {
  let out = strings[0] as string
  for (let i = 0; i < values.length; i++) {
    out += render(values[i] as Part) + (strings[i + 1] as string)
  }
  return new Html(out)
}

/**
 * A time for people: ISO in the `datetime` attribute and the tooltip; console.js rewrites
 * the text into the viewer's time zone (without script it stays ISO, in UTC).
 */
export function time(epochMs: number | null, empty = '—'): Html {
  if (epochMs === null) return html`<span>${empty}</span>`
  const iso = new Date(epochMs).toISOString()
  return html`<time datetime="${iso}" title="${iso}">${iso.replace(/\.\d{3}Z$/, 'Z')}</time>`
}

/** Levels of a JSON value indented by `prettyJson`; deeper ones are written compact. */
export const PRETTY_JSON_DEPTH = 6

/**
 * JSON for people, bounded: indented to `PRETTY_JSON_DEPTH` levels, compact below. Why: full
 * indentation grows with depth squared (4 KB of nested arrays became 16 MB of page); with
 * the depth capped, each line carries at most 12 spaces, so the text is linear in the input.
 * The result is still valid JSON (the edit form sends it back as is).
 */
export function prettyJson(value: unknown, depth = 0): string {
  if (value === null || typeof value !== 'object' || depth >= PRETTY_JSON_DEPTH) {
    return JSON.stringify(value) ?? 'null'
  }
  const pad = '  '.repeat(depth + 1)
  const end = '  '.repeat(depth)
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]'
    return `[\n${value.map((v) => pad + prettyJson(v, depth + 1)).join(',\n')}\n${end}]`
  }
  const entries = Object.entries(value as Record<string, unknown>)
  if (entries.length === 0) return '{}'
  return `{\n${entries
    .map(([k, v]) => `${pad}${JSON.stringify(k)}: ${prettyJson(v, depth + 1)}`)
    .join(',\n')}\n${end}}`
}
