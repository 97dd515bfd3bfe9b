/**
 * What survived a chaos run, counted from every request the load sent, the times of the
 * faults and revocations, and the audit log: the figures the suite asserts and the table it
 * prints (docs/scale-out.md, "Chaos").
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { Sent } from './load.ts'

/** A fault or a revocation, at `at` (performance.now() of the suite, ms). */
export interface Happening {
  readonly at: number
  readonly what: string
  readonly detail: string
}

/** Revoked during the run: `committedAt` is when the revoking call returned. */
export interface Revocation {
  readonly id: string
  readonly committedAt: number
  readonly how: string
}

/** A run's record as the suite writes it: faults and revocations, in the order they came. */
export interface Timeline {
  readonly happenings: Happening[]
  readonly revocations: Revocation[]
  /** Records a fault or a step (at: default now). */
  happened(what: string, detail: string, at?: number): void
  /** Records `ids` revoked by `how`, committed now; the time it was committed. */
  revoked(ids: readonly string[], how: string): number
}

export function timeline(): Timeline {
  const happenings: Happening[] = []
  const revocations: Revocation[] = []
  return {
    happenings,
    revocations,
    happened(what, detail, at = performance.now()) {
      happenings.push({ at, what, detail })
    },
    revoked(ids, how) {
      const committedAt = performance.now()
      for (const id of ids) revocations.push({ id, committedAt, how })
      return committedAt
    },
  }
}

/** `RunFacts.postgresDown` of a run that never stopped Postgres. */
export const POSTGRES_NEVER_DOWN = { from: Number.POSITIVE_INFINITY, to: Number.NEGATIVE_INFINITY }

/**
 * Stops Postgres (fast shutdown: clients disconnected) for `downMs`, starts it and waits until
 * it answers; records both on `run` and returns the outage, as `RunFacts.postgresDown`.
 */
export async function stopPostgresFor(
  postgres: { halt(mode: 'fast'): Promise<void>; start(): Promise<void> },
  run: Pick<Timeline, 'happened'>,
  detail: string,
  downMs = 2000,
): Promise<{ from: number; to: number }> {
  const from = performance.now()
  await postgres.halt('fast')
  run.happened('Postgres stopped (fast shutdown)', detail, from)
  await sleep(downMs)
  await postgres.start()
  const to = performance.now()
  run.happened('Postgres answers again', `down ${((to - from) / 1000).toFixed(1)} s`, to)
  return { from, to }
}

export interface RunFacts {
  readonly sent: readonly Sent[]
  readonly happenings: readonly Happening[]
  readonly revocations: readonly Revocation[]
  /** While Postgres was not answering: from the start of its stop to ready again. */
  readonly postgresDown: { readonly from: number; readonly to: number }
  /** How long after Postgres answers again a 503 is still allowed (see `ALLOWED_503`). */
  readonly recoveryGraceMs: number
  /** The bound on a revocation reaching every instance. */
  readonly revocationBoundMs: number
  /** Request ids of the 401s stored as `auth.failed` events. */
  readonly auditedRequestIds: ReadonlySet<string>
  /** Sum of `details.count` of the `audit.dropped` events. */
  readonly auditDropped: number
  /** Audit events the restarted instance stored from its killed predecessor's spool. */
  readonly spoolRecovered: number
  /** Restarted processes whose spool recovery failed (the rest left for their next start). */
  readonly spoolRecoveryFailures?: number | undefined
  /** Audit events still in the instances' spools after their graceful stops (none expected). */
  readonly spoolLeftAtEnd?: number | undefined
  /** 401s of requests sent without a request id after the load (the final sweep's). */
  readonly unsent401?: number | undefined
  /** Requests with revoked credentials accepted in the final sweep over every instance. */
  readonly acceptedAtEnd: number
  readonly start: number
}

export interface Survival {
  readonly byInstance: Readonly<Record<string, Tally>>
  readonly total: Tally
  /** 503 `unavailable` answers to requests in flight while Postgres was down. */
  readonly allowed503: number
  /** The last of them was answered this long after Postgres answered again (ms, or null). */
  readonly last503AfterRecoveryMs: number | null
  /** Every other 5xx, as `status code` -> count. */
  readonly forbidden5xx: Readonly<Record<string, number>>
  /** 200s for a key revoked mid-run, sent after it was revoked (within the bound or not). */
  readonly acceptedAfterRevoke: number
  /** ... of which sent more than the bound after the revoke committed. */
  readonly acceptedLate: number
  /** The latest a revoked key was still accepted, ms after its revoke committed (or null). */
  readonly latestAcceptanceMs: number | null
  /** 200s for keys revoked before the run. */
  readonly acceptedRevokedBefore: number
  /** 401s answered whose audit event is not in the store. */
  readonly auditLost: number
  /**
   * Where those went missing: `instance @second (after: the last fault or step before the
   * answer[, burst])` -> count, so that a failure says which fault window lost them.
   */
  readonly auditLostWhere: Readonly<Record<string, number>>
  /** `auth.failed` events whose request id the load never sent (the sweep's, or misread ids). */
  readonly auditedUnsent: number
  readonly answered401: number
}

export interface Tally {
  sent: number
  answered: number
  statuses: Record<string, number>
  /** No answer, by cause: the socket error code or `timeout`. */
  unanswered: Record<string, number>
}

export function survival(facts: RunFacts): Survival {
  const byInstance: Record<string, Tally> = {}
  const total = newTally()
  const forbidden5xx: Record<string, number> = {}
  let allowed503 = 0
  let last503AfterRecoveryMs: number | null = null
  for (const request of facts.sent) {
    byInstance[request.instance] ??= newTally()
    for (const tally of [byInstance[request.instance] as Tally, total]) count(tally, request)
    if (request.status < 500) continue
    if (request.status === 503 && request.code === 'unavailable' && duringOutage(request, facts)) {
      allowed503++
      const after = request.answeredAt - facts.postgresDown.to
      last503AfterRecoveryMs = Math.max(last503AfterRecoveryMs ?? after, after)
    } else {
      const key = `${request.status} ${request.code ?? ''}`.trim()
      forbidden5xx[key] = (forbidden5xx[key] ?? 0) + 1
    }
  }

  const revokedAt = new Map(facts.revocations.map((r) => [r.id, r.committedAt]))
  let acceptedAfterRevoke = 0
  let acceptedLate = 0
  let latestAcceptanceMs: number | null = null
  let acceptedRevokedBefore = 0
  let answered401 = 0
  let auditLost = 0
  const auditLostWhere: Record<string, number> = {}
  for (const request of facts.sent) {
    const { credential } = request
    if (request.status === 401) {
      answered401++
      if (!facts.auditedRequestIds.has(request.requestId)) {
        auditLost++
        const where = lossWindow(request, facts)
        auditLostWhere[where] = (auditLostWhere[where] ?? 0) + 1
      }
    }
    if (request.status !== 200) continue
    if (credential.kind === 'revoked') acceptedRevokedBefore++
    const committed = credential.id === undefined ? undefined : revokedAt.get(credential.id)
    if (committed === undefined || request.sentAt <= committed) continue
    // Sent after the revoke returned and still accepted: within the bound, or late.
    acceptedAfterRevoke++
    const after = request.sentAt - committed
    latestAcceptanceMs = Math.max(latestAcceptanceMs ?? 0, after)
    if (after > facts.revocationBoundMs) acceptedLate++
  }
  return {
    byInstance,
    total,
    allowed503,
    last503AfterRecoveryMs,
    forbidden5xx,
    acceptedAfterRevoke,
    acceptedLate,
    latestAcceptanceMs,
    acceptedRevokedBefore,
    auditLost,
    auditLostWhere,
    auditedUnsent: auditedUnsent(facts),
    answered401,
  }
}

function auditedUnsent(facts: RunFacts): number {
  const sent = new Set(facts.sent.map((request) => request.requestId))
  let unsent = 0
  for (const id of facts.auditedRequestIds) if (!sent.has(id)) unsent++
  return unsent
}

/** `B @5 s (after: SIGKILL instance B, burst)`: the instance, the second and the fault window. */
function lossWindow(request: Sent, facts: RunFacts): string {
  let after = 'start'
  for (const h of facts.happenings) if (h.at <= request.answeredAt) after = h.what
  const second = Math.floor((request.answeredAt - facts.start) / 1000)
  const burst = request.requestId.includes('burst') ? ', burst' : ''
  return `${request.instance} @${second} s (after: ${after}${burst})`
}

/**
 * A 503 is allowed only for a request in flight while Postgres was down: answered after it
 * began to stop, and sent before it answered again plus the grace (the change-log poll that
 * finds the store back, and the pool's reconnect).
 */
function duringOutage(request: Sent, facts: RunFacts): boolean {
  const { from, to } = facts.postgresDown
  return request.answeredAt >= from && request.sentAt <= to + facts.recoveryGraceMs
}

function newTally(): Tally {
  return { sent: 0, answered: 0, statuses: {}, unanswered: {} }
}

function count(tally: Tally, request: Sent): void {
  tally.sent++
  if (request.status === 0) {
    const cause = request.error ?? 'unknown'
    tally.unanswered[cause] = (tally.unanswered[cause] ?? 0) + 1
    return
  }
  tally.answered++
  tally.statuses[request.status] = (tally.statuses[request.status] ?? 0) + 1
}

/** The tables, in Markdown, as docs/scale-out.md shows them. */
export function survivalTables(facts: RunFacts, result: Survival): string {
  const seconds = (at: number) => ((at - facts.start) / 1000).toFixed(1)
  const instances = Object.keys(result.byInstance).sort()
  const columns = [...instances, 'total']
  const tallies = [...instances.map((name) => result.byInstance[name] as Tally), result.total]
  const statuses = [...new Set(tallies.flatMap((t) => Object.keys(t.statuses)))].sort()
  const causes = [...new Set(tallies.flatMap((t) => Object.keys(t.unanswered)))].sort()
  const row = (label: string, cells: readonly (string | number)[]) =>
    `| ${label} | ${cells.join(' | ')} |`
  const lines = [
    row('requests', columns),
    row(
      '---',
      columns.map(() => '---'),
    ),
    row(
      'sent',
      tallies.map((t) => t.sent),
    ),
    row(
      'answered',
      tallies.map((t) => t.answered),
    ),
    ...statuses.map((status) =>
      row(
        `… ${status}`,
        tallies.map((t) => t.statuses[status] ?? 0),
      ),
    ),
    ...causes.map((cause) =>
      row(
        `no answer: ${cause}`,
        tallies.map((t) => t.unanswered[cause] ?? 0),
      ),
    ),
    '',
    '| at (s) | what | detail |',
    '| --- | --- | --- |',
    ...facts.happenings.map((h) => `| ${seconds(h.at)} | ${h.what} | ${h.detail} |`),
    '',
    '| promise | bound | result |',
    '| --- | --- | --- |',
    `| 5xx only while Postgres is down | 503 \`unavailable\` for requests in flight from its stop until ${facts.recoveryGraceMs} ms after it answers again | ${result.allowed503} such 503s, the last answered ${relative(result.last503AfterRecoveryMs)} Postgres answered again; other 5xx: ${describe(result.forbidden5xx)} |`,
    `| a key revoked mid-run is refused everywhere | a request sent > ${facts.revocationBoundMs} ms after the revoke committed is never accepted | ${facts.revocations.length} keys revoked; accepted after their revoke: ${result.acceptedAfterRevoke} (latest ${ms(result.latestAcceptanceMs)} after); honoured late: **${result.acceptedLate}** |`,
    `| revoked keys are never accepted | keys revoked before the run, and every revoked key on every instance and worker at the end | accepted: **${result.acceptedRevokedBefore}** during the run, **${facts.acceptedAtEnd}** at the end |`,
    `| no audit event lost | every 401 answered has its \`auth.failed\` event (loss only as counted by \`audit.dropped\`) | ${result.answered401} 401s answered; events missing: **${result.auditLost}**; \`audit.dropped\`: ${facts.auditDropped}; recovered from the killed instance's spool on restart: ${facts.spoolRecovered}${facts.spoolRecoveryFailures === undefined ? '' : ` (recoveries failed: ${facts.spoolRecoveryFailures})`} |`,
    `| … where audit events went missing | instance, second answered (after the last fault or step before it) | ${lossWhere(result.auditLostWhere)}${facts.spoolLeftAtEnd === undefined ? '' : `; left in the spools after the stops: ${facts.spoolLeftAtEnd}`}; stored under request ids the load never sent: ${result.auditedUnsent}${facts.unsent401 === undefined ? '' : ` (${facts.unsent401} 401s sent without one)`} |`,
  ]
  return lines.join('\n')
}

/** The loss windows, largest first (at most 8, the rest summed), or — when nothing is lost. */
function lossWhere(where: Readonly<Record<string, number>>): string {
  const entries = Object.entries(where).sort((a, b) => b[1] - a[1])
  if (entries.length === 0) return '—'
  const shown = entries.slice(0, 8).map(([w, n]) => `${n} × ${w}`)
  const rest = entries.slice(8).reduce((sum, [, n]) => sum + n, 0)
  return [...shown, ...(rest > 0 ? [`${rest} elsewhere`] : [])].join('; ')
}

function relative(value: number | null): string {
  if (value === null) return '—'
  return `${Math.abs(value).toFixed(0)} ms ${value < 0 ? 'before' : 'after'}`
}

function ms(value: number | null): string {
  return value === null ? '—' : `${value.toFixed(0)} ms`
}

function describe(counts: Readonly<Record<string, number>>): string {
  const entries = Object.entries(counts)
  return entries.length === 0 ? '**0**' : entries.map(([k, v]) => `**${v}** × ${k}`).join(', ')
}
