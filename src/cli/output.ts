import { escapeUnsafeText } from '../core/operator-text.ts'

export { counted } from '../core/operator-text.ts'

import type { CliIo } from './io.ts'

/** Where a command writes: human lines and tables, or exactly one JSON document. */
export interface Output {
  /** Writes one line (a newline is added) to stdout. */
  line(text?: string): void
  /** Writes a JSON document, pretty-printed, to stdout. */
  json(document: unknown): void
  /** Writes a left-aligned table with a header row to stdout; `(none)` when empty. */
  table(headers: readonly string[], rows: readonly (readonly string[])[]): void
  /** Writes one line to stderr: notes and warnings that must not pollute stdout. */
  note(text: string): void
}

/**
 * An Output over the CLI's streams. Everything written passes `escapeUnsafeText`: stored
 * values may predate the input rule (or come from a store edited by hand), and a terminal
 * must never receive a control, bidi or zero-width character from them. Multi-line text is
 * escaped line by line, so the newlines we write ourselves stay newlines.
 */
export function createOutput(io: CliIo): Output {
  return {
    line: (text = '') => io.stdout.write(`${escapeLines(text)}\n`),
    // JSON.stringify escapes C0 only; the rest become \uXXXX escapes, so the document
    // still parses to exactly the stored values.
    json: (document) => io.stdout.write(`${escapeJson(JSON.stringify(document, null, 2))}\n`),
    table: (headers, rows) => io.stdout.write(formatTable(headers, rows)),
    note: (text) => io.stderr.write(`${escapeLines(text)}\n`),
  }
}

function escapeLines(text: string): string {
  return text.split('\n').map(escapeUnsafeText).join('\n')
}

const JSON_UNSAFE =
  /[\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff]|\p{Cs}/gu

function escapeJson(text: string): string {
  return text.replace(JSON_UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/** Renders rows as aligned columns separated by two spaces, with a trailing newline. */
export function formatTable(
  headers: readonly string[],
  rows: readonly (readonly string[])[],
): string {
  if (rows.length === 0) return '(none)\n'
  rows = rows.map((row) => row.map(escapeUnsafeText))
  const widths = headers.map((header, i) =>
    Math.max(header.length, ...rows.map((row) => (row[i] ?? '').length)),
  )
  const render = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd()
  return `${[render(headers), ...rows.map(render)].join('\n')}\n`
}

/** ISO 8601 to the second (`2026-01-31T12:00:00Z`), or `-` for null. */
export function formatTime(epochMs: number | null): string {
  return epochMs === null ? '-' : new Date(epochMs).toISOString().replace(/\.\d{3}Z$/, 'Z')
}

/** ISO 8601 with milliseconds for JSON output, or null. */
export function isoTime(epochMs: number | null): string | null {
  return epochMs === null ? null : new Date(epochMs).toISOString()
}
