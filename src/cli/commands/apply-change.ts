/** What `apply` plans: one line per object, and the comparisons its planners share. */
import type { OperationDeps } from '../../auth/operations.ts'
import type { RateLimitOverride } from '../../core/ports.ts'
import { formatRate } from '../key-options.ts'

export type ApplyAction = 'create' | 'update' | 'remove' | 'unchanged'

/** One line of the plan: what apply does (or, with --dry-run, would do) to one object. */
export interface ApplyChange {
  readonly kind: 'tenant' | 'issuer' | 'policy' | 'key'
  readonly id: string
  readonly action: ApplyAction
  readonly note?: string
  /** The command it amounts to, for the record (`tenant create acme --name ...`). */
  readonly command?: readonly string[]
  /** What carries it out inside apply's transaction (not part of the printed plan). */
  readonly run?: (deps: OperationDeps) => Promise<unknown>
}

export function sameRate(a: RateLimitOverride | null, b: RateLimitOverride | null): boolean {
  return a === b || (a !== null && b !== null && a.max === b.max && a.windowSec === b.windowSec)
}

/** JSON with object keys sorted and undefined values left out: equal data, equal text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>)
            .filter(([, x]) => x !== undefined)
            .sort(([a], [b]) => (a < b ? -1 : 1)),
        )
      : v,
  )
}

/** The rate-limit option of a `tenant edit` or `pat edit`, appended to `command`, and its note. */
export function rateLimitArgs(
  rateLimit: RateLimitOverride | null | undefined,
  command: string[],
  notes: string[],
): void {
  if (rateLimit === null) {
    command.push('--clear-rate-limit')
    notes.push('default rate limit')
  } else if (rateLimit !== undefined) {
    command.push('--rate-limit', formatRate(rateLimit))
    notes.push(`rate limit ${formatRate(rateLimit)}`)
  }
}

/** `tenant enable|disable ID` or `pat enable|disable ID` as a plan line. */
export function switchChange(
  kind: 'tenant' | 'key',
  id: string,
  enabled: boolean,
  run: (deps: OperationDeps) => Promise<unknown>,
): ApplyChange {
  const verb = enabled ? 'enable' : 'disable'
  return {
    kind,
    id,
    action: 'update',
    note: verb,
    command: [kind === 'key' ? 'pat' : 'tenant', verb, id],
    run,
  }
}
