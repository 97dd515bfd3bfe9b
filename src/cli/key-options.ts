/**
 * Command-line spellings of a key's product fields (issue #24), shared by `pat issue`,
 * `pat edit` and `tenant edit`: `--rate-limit 100/1m`, `--quota 1000 --quota-refill monthly`,
 * `--metadata '{"plan":"pro"}'`, `--external-id cus_123`, and the `--clear-*` flags of
 * `edit`. Only the spelling is checked here (a bad one is a usage error naming the flag);
 * the values' bounds are the application layer's (auth/key-fields.ts).
 */

import type { Buffer } from 'node:buffer'
import { X509Certificate } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { QuotaSpec } from '../auth/key-fields.ts'
import type { QuotaEdit } from '../auth/pat-lifecycle.ts'
import type { UsageRange } from '../auth/usage.ts'
import { certificateThumbprint } from '../core/certificate-binding.ts'
import type { Quota, RateLimitOverride } from '../core/ports.ts'
import { flag, type OptionDefs, optionalString, type ParsedArgs } from './args.ts'
import { parseDuration } from './durations.ts'
import { UsageError } from './errors.ts'
import { printable } from './validate.ts'

/** The options of a key's limits, quota, metadata and external id. */
export const KEY_OPTIONS: OptionDefs = {
  'rate-limit': {
    type: 'string',
    value: 'N/WINDOW',
    description: "The key's own request rate instead of rateLimit.perToken, e.g. 100/1m, 10/1s.",
  },
  quota: {
    type: 'string',
    value: 'N',
    description: 'A quota of N uses (per period with --quota-refill); an exhausted key gets 429.',
  },
  'quota-refill': {
    type: 'string',
    value: 'REFILL',
    description:
      'When the quota comes back: none (default), daily, monthly (UTC), or a duration (e.g. 12h).',
  },
  metadata: {
    type: 'string',
    value: 'JSON',
    description: 'A JSON object of your own (at most 4096 bytes), e.g. \'{"plan":"pro"}\'.',
  },
  'external-id': {
    type: 'string',
    value: 'ID',
    description: 'Your own id for the key (a customer or account id); searchable.',
  },
}

/** Binding a PAT to a client certificate (RFC 8705), for `pat issue` and `pat edit`. */
export const CERTIFICATE_OPTIONS: OptionDefs = {
  'bind-cert': {
    type: 'string',
    value: 'FILE',
    description: 'Bind the key to this client certificate (PEM or DER): it is refused without it.',
  },
  'cert-thumbprint': {
    type: 'string',
    value: 'S256',
    description:
      'Bind the key to the certificate with this x5t#S256 (base64url SHA-256 of its DER).',
  },
}

/**
 * `--bind-cert FILE` as the certificate's thumbprint, or `--cert-thumbprint` as given (its
 * format is checked by the application layer), or undefined when neither is given.
 */
export function certificateOption(args: ParsedArgs): string | undefined {
  const file = optionalString(args, 'bind-cert')
  const thumbprint = optionalString(args, 'cert-thumbprint')
  if (file !== undefined && thumbprint !== undefined) {
    throw new UsageError('--bind-cert and --cert-thumbprint name one binding twice; give one')
  }
  if (file === undefined) return thumbprint
  let bytes: Buffer
  try {
    bytes = readFileSync(file)
  } catch (error) {
    throw new UsageError(
      `--bind-cert: ${printable(file)} cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
    )
  }
  let certificate: X509Certificate
  try {
    certificate = new X509Certificate(bytes)
  } catch {
    throw new UsageError(
      `--bind-cert: ${printable(file)} holds no certificate (expected PEM or DER)`,
    )
  }
  return certificateThumbprint(certificate.raw)
}

/** The `--clear-*` flags of `pat edit`. */
export const CLEAR_OPTIONS: OptionDefs = {
  'clear-rate-limit': { type: 'boolean', description: 'Back to the default rate limit.' },
  'clear-quota': { type: 'boolean', description: 'Remove the quota.' },
  'clear-metadata': { type: 'boolean', description: 'Remove the metadata.' },
  'clear-external-id': { type: 'boolean', description: 'Remove the external id.' },
}

const RATE = /^([1-9][0-9]{0,9})\/([1-9][0-9]{0,6}[smhdw])$/
const COUNT = /^[1-9][0-9]{0,12}$/

/** `--rate-limit N/WINDOW`, or undefined when absent. */
export function rateLimitOption(
  args: ParsedArgs,
  name = 'rate-limit',
): RateLimitOverride | undefined {
  const text = optionalString(args, name)
  return text === undefined ? undefined : parseRate(text, `--${name}`)
}

/** `N/WINDOW` (`100/1m`, `10/1s`) as a rate limit; `label` names the value in the error. */
export function parseRate(text: string, label: string): RateLimitOverride {
  const match = RATE.exec(text)
  const windowMs = match ? parseDuration(match[2] as string) : undefined
  if (!match || windowMs === undefined || windowMs % 1000 !== 0) {
    throw new UsageError(
      `${label}: '${printable(text)}' is not a rate (expected N/WINDOW, e.g. 100/1m or 10/1s)`,
    )
  }
  return { max: Number(match[1]), windowSec: windowMs / 1000 }
}

/** A rate limit as `parseRate` reads it back, e.g. `50000/60s`. */
export function formatRate(rate: RateLimitOverride): string {
  return `${rate.max}/${rate.windowSec}s`
}

/** A quota's refill as `--quota-refill` reads it back: none, daily, monthly or `43200s`. */
export function formatRefill(quota: QuotaSpec | Quota): string {
  return quota.refill === 'interval' ? `${quota.intervalSec}s` : quota.refill
}

/**
 * `--quota N [--quota-refill R]`, or undefined when `--quota` is absent. Without
 * `--quota-refill` the refill is left out: a new key's quota has none, an edited one keeps
 * its own (pat-lifecycle.ts).
 */
export function quotaOption(args: ParsedArgs): QuotaEdit | undefined {
  const limitText = optionalString(args, 'quota')
  const refillText = optionalString(args, 'quota-refill')
  if (limitText === undefined) {
    if (refillText !== undefined) throw new UsageError('--quota-refill needs --quota N')
    return undefined
  }
  if (!COUNT.test(limitText)) {
    throw new UsageError(
      `--quota: '${printable(limitText)}' is not a number of uses (expected e.g. 1000)`,
    )
  }
  const limit = Number(limitText)
  if (refillText === undefined) return { limit }
  if (refillText === 'none') return { limit, refill: 'none' }
  if (refillText === 'daily' || refillText === 'monthly') return { limit, refill: refillText }
  const ms = parseDuration(refillText)
  if (ms === undefined || ms % 1000 !== 0) {
    throw new UsageError(
      `--quota-refill: '${printable(refillText)}' is not a refill (expected none, daily, monthly or a duration such as 12h)`,
    )
  }
  return { limit, refill: 'interval', intervalSec: ms / 1000 }
}

/** `--metadata JSON`, or undefined when absent. */
export function metadataOption(args: ParsedArgs): Record<string, unknown> | undefined {
  const text = optionalString(args, 'metadata')
  if (text === undefined) return undefined
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    throw new UsageError(`--metadata: not JSON (expected an object, e.g. '{"plan":"pro"}')`)
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new UsageError('--metadata: expected a JSON object, e.g. \'{"plan":"pro"}\'')
  }
  return value as Record<string, unknown>
}

/**
 * A field of `pat edit`: its new value, null for `--clear-<name>`, undefined when neither
 * is given; both at once is a usage error.
 */
export function editedField<T>(
  args: ParsedArgs,
  name: string,
  value: T | undefined,
): T | null | undefined {
  const clear = flag(args, `clear-${name}`)
  if (clear && value !== undefined) {
    throw new UsageError(`--${name} and --clear-${name} contradict each other; give one`)
  }
  return clear ? null : value
}

/** `--since` / `--until`: a duration ago (`2h`) or an ISO 8601 time. */
/** `--NAME TIME`: an ISO 8601 time or a duration ago (`6h`); undefined when not given. */
export function timeOption(args: ParsedArgs, name: string, now: number): number | undefined {
  const text = optionalString(args, name)
  if (text === undefined) return undefined
  const ago = parseDuration(text)
  if (ago !== undefined) return now - ago
  const at = Date.parse(text)
  if (Number.isNaN(at)) {
    throw new UsageError(
      `--${name}: '${printable(text)}' is not a time (expected e.g. 6h or 2026-01-31T00:00:00Z)`,
    )
  }
  return at
}

/** The usage options of `pat usage` and `tenant usage`. */
export const USAGE_OPTIONS: OptionDefs = {
  resolution: {
    type: 'string',
    value: 'R',
    description: 'minute (default: the last hour), hour (the last 48 h) or day (the last 30 days).',
  },
  since: {
    type: 'string',
    value: 'TIME',
    description: 'From this time (ISO 8601) or this long ago (e.g. 6h).',
  },
  until: {
    type: 'string',
    value: 'TIME',
    description: 'Until this time (ISO 8601) or this long ago.',
  },
  csv: { type: 'boolean', description: 'Print CSV (one row per bucket) instead of a table.' },
}

export function usageRangeOption(args: ParsedArgs, now: number): UsageRange {
  const resolution = optionalString(args, 'resolution')
  if (resolution !== undefined && !['minute', 'hour', 'day'].includes(resolution)) {
    throw new UsageError(`--resolution: '${printable(resolution)}' is not minute, hour or day`)
  }
  return {
    resolution: resolution as UsageRange['resolution'],
    since: timeOption(args, 'since', now),
    until: timeOption(args, 'until', now),
  }
}
