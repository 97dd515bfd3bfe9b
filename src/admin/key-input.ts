/**
 * A key's product fields as the admin API (JSON) and the console (form fields) send them,
 * read into the application layer's types. Only the shape is checked here (a wrong type is
 * `invalid_input` naming the field and the value); the bounds are auth/key-fields.ts's.
 */
import { badValue } from '../auth/key-fields.ts'
import type { QuotaEdit } from '../auth/pat-lifecycle.ts'
import type { QuotaRefill, RateLimitOverride } from '../core/ports.ts'

type Body = Record<string, unknown>

const REFILLS: readonly string[] = ['none', 'daily', 'monthly', 'interval']

/** Refuses a body with a field the endpoint does not know (a typo must not be ignored). */
export function onlyFields(body: Body, known: readonly string[]): void {
  for (const key of Object.keys(body)) {
    if (!known.includes(key)) throw badValue('body', key, `only ${known.join(', ')}`)
  }
}

/** `{ max, windowSec }`, null (the default), or undefined when absent. */
export function rateLimitOf(value: unknown): RateLimitOverride | null | undefined {
  if (value === undefined || value === null) return value
  const { max, windowSec } = (value ?? {}) as Record<string, unknown>
  if (typeof value !== 'object' || typeof max !== 'number' || typeof windowSec !== 'number') {
    throw badValue('rateLimit', value, '{ "max": requests, "windowSec": seconds } or null')
  }
  return { max, windowSec }
}

/**
 * `{ limit, refill?, intervalSec? }`, null (none), or undefined when absent. Without `refill`
 * an edit keeps the key's refill and a new key's quota has none (pat-lifecycle.ts).
 */
export function quotaOf(value: unknown): QuotaEdit | null | undefined {
  if (value === undefined || value === null) return value
  const { limit, refill, intervalSec } = (value ?? {}) as Record<string, unknown>
  if (
    typeof value !== 'object' ||
    typeof limit !== 'number' ||
    (refill !== undefined && (typeof refill !== 'string' || !REFILLS.includes(refill))) ||
    (intervalSec !== undefined && typeof intervalSec !== 'number')
  ) {
    throw badValue(
      'quota',
      value,
      '{ "limit": uses, "refill": "none" | "daily" | "monthly" | "interval", "intervalSec"?: seconds } or null',
    )
  }
  return {
    limit,
    ...(refill === undefined ? {} : { refill: refill as QuotaRefill }),
    ...(intervalSec === undefined ? {} : { intervalSec: intervalSec as number }),
  }
}

/** A JSON object, null (none), or undefined when absent. */
export function metadataOf(value: unknown): Record<string, unknown> | null | undefined {
  if (value === undefined || value === null) return value
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw badValue('metadata', value, 'a JSON object or null')
  }
  return value as Record<string, unknown>
}

/** A string, null (none), or undefined when absent. */
export function externalIdOf(value: unknown): string | null | undefined {
  if (value === undefined || value === null || typeof value === 'string') return value
  throw badValue('externalId', value, 'a string or null')
}

/** A certificate binding (`x5t#S256`, checked by pat-lifecycle.ts), null (unbound), or absent. */
export function certificateThumbprintOf(value: unknown): string | null | undefined {
  if (value === undefined || value === null || typeof value === 'string') return value
  throw badValue('certificateThumbprint', value, 'a string (x5t#S256) or null')
}

/** The console's rate limit fields: both empty is the default (null). */
export function rateLimitFromForm(max: string | undefined, windowSec: string | undefined) {
  const m = (max ?? '').trim()
  const w = (windowSec ?? '').trim()
  if (m === '' && w === '') return null
  return { max: formNumber(m, 'rate limit'), windowSec: formNumber(w || '60', 'rate limit window') }
}

/**
 * The console's quota fields: an empty limit is no quota (null); a form without a refill
 * field keeps the key's refill, as the API does.
 */
export function quotaFromForm(
  limit: string | undefined,
  refill: string | undefined,
  intervalHours: string | undefined,
): QuotaEdit | null {
  const l = (limit ?? '').trim()
  if (l === '') return null
  if (refill === undefined) return { limit: formNumber(l, 'quota') }
  const r = refill.trim()
  if (!REFILLS.includes(r)) throw badValue('quota refill', r, 'none, daily, monthly or interval')
  if (r !== 'interval') return { limit: formNumber(l, 'quota'), refill: r as QuotaRefill }
  const hours = formNumber((intervalHours ?? '').trim(), 'quota interval (hours)')
  return { limit: formNumber(l, 'quota'), refill: 'interval', intervalSec: hours * 3600 }
}

/** The console's metadata field: JSON text, empty for none. */
export function metadataFromForm(text: string | undefined): Record<string, unknown> | null {
  const t = (text ?? '').trim()
  if (t === '') return null
  let value: unknown
  try {
    value = JSON.parse(t)
  } catch {
    throw badValue('metadata', t, 'a JSON object, e.g. {"plan": "pro"}')
  }
  return metadataOf(value) ?? null
}

/** A whole number typed into a form, or the refusal naming the field and the text. */
export function formNumber(text: string, field: string): number {
  if (!/^\d{1,13}$/.test(text)) throw badValue(field, text, 'a whole number')
  return Number(text)
}
