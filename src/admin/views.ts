import type { IssuerConfig } from '../core/issuer.ts'
import type { JwksStatus } from '../core/jwks.ts'
import type { StoredAuditEvent, StoredIssuer } from '../stores/store.ts'

const iso = (ms: number | null | undefined) => (ms == null ? null : new Date(ms).toISOString())

export function auditView(event: StoredAuditEvent) {
  return { ...event, time: new Date(event.time).toISOString() }
}

/**
 * An issuer with its key-source health. Static keys are always loaded and their key ids
 * are listed; remote sources show the running server's last fetch and staleness. A shared
 * secret or PEM is never shown.
 */
export function issuerView(issuer: StoredIssuer | IssuerConfig, health: JwksStatus | undefined) {
  const source = issuer.keySource
  const keyIds =
    source.kind === 'jwks'
      ? source.jwks.keys.map((k) => (typeof k.kid === 'string' ? k.kid : null))
      : source.kind === 'pem'
        ? [source.kid ?? null]
        : null
  return {
    issuer: issuer.issuer,
    audiences: issuer.audiences,
    keySource: {
      kind: source.kind,
      ...(source.kind === 'jwks_url' ? { url: source.url } : {}),
    },
    algorithms: issuer.algorithms ?? null,
    createdAt: 'createdAt' in issuer ? iso(issuer.createdAt) : null,
    keys: health
      ? {
          state: health.state,
          lastFetchAt: iso(health.loadedAt),
          failingSince: iso(health.failingSince),
          keyIds,
        }
      : { state: 'static', lastFetchAt: null, failingSince: null, keyIds },
  }
}

const CSV_COLUMNS = [
  'id',
  'time',
  'type',
  'tenantId',
  'actor',
  'outcome',
  'clientAddress',
  'requestId',
  'details',
] as const

/**
 * Audit events as CSV (RFC 4180). A cell that a spreadsheet would run as a formula
 * (`= + - @` first) gets a leading `'`: audit data is partly attacker-chosen (paths).
 */
export function auditCsv(events: readonly StoredAuditEvent[]): string {
  const cell = (value: unknown) => {
    let text = value == null ? '' : typeof value === 'string' ? value : JSON.stringify(value)
    if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`
    return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text
  }
  const rows = events.map((e) => {
    const view = auditView(e) as Record<string, unknown>
    return CSV_COLUMNS.map((c) => cell(view[c])).join(',')
  })
  return `${[CSV_COLUMNS.join(','), ...rows].join('\r\n')}\r\n`
}
