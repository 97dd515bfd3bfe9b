/**
 * Webhook delivery of audit events: the wire format, the signature, and one HTTP POST.
 *
 * A delivery is `POST <webhookUrl>` with a JSON body `{ "events": [ <event>, ... ] }` (the
 * event schema of docs/events.md) and the header
 *
 *     X-Tokengate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
 *
 * (the scheme Stripe and others use). Signing the timestamp with the body lets a receiver
 * refuse replays older than its tolerance; the body must be verified as the exact bytes
 * received, before any JSON parsing.
 */
import { Buffer } from 'node:buffer'
import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto'
import { type Clock, systemClock } from '../core/ports.ts'
import type { StoredAuditEvent } from '../stores/store.ts'

export const SIGNATURE_HEADER = 'x-tokengate-signature'
export const DELIVERY_HEADER = 'x-tokengate-delivery'
/** Shortest accepted `events.webhookSecret`, in characters. */
export const MIN_SECRET_LENGTH = 16

/** One event as delivered: the stored event with `time` as an ISO 8601 UTC string. */
export type WebhookEvent = Omit<StoredAuditEvent, 'time'> & { readonly time: string }

/** The body of one delivery, as exact bytes to sign and send. */
export function webhookBody(events: readonly StoredAuditEvent[]): string {
  return JSON.stringify({
    events: events.map((e) => ({
      id: e.id,
      type: e.type,
      time: new Date(e.time).toISOString(),
      tenantId: e.tenantId,
      actor: e.actor,
      outcome: e.outcome,
      clientAddress: e.clientAddress,
      requestId: e.requestId,
      details: e.details,
    })),
  })
}

/**
 * The `X-Tokengate-Signature` value for `body` sent at `unixSeconds`.
 *
 * @example
 * signWebhook('s3cret-at-least-16', '{"events":[]}', 1767225600)
 * // 't=1767225600,v1=5f1c…'
 */
export function signWebhook(secret: string, body: string, unixSeconds: number): string {
  const t = Math.floor(unixSeconds)
  const mac = createHmac('sha256', secret).update(`${t}.${body}`, 'utf8').digest('hex')
  return `t=${t},v1=${mac}`
}

/**
 * Receiver side (and our tests): whether `header` is a valid signature of `body` made no
 * more than `toleranceSec` (default 300) from `nowSeconds`. Any `v1=` entry may match, so a
 * sender may list two during a secret rollover.
 *
 * Why constant-time: comparing MACs with `===` stops at the first differing character, and
 * the time that takes would let an attacker forge a valid MAC byte by byte.
 */
export function verifyWebhookSignature(
  secret: string,
  header: string | undefined,
  body: string,
  nowSeconds: number,
  toleranceSec = 300,
): boolean {
  if (header === undefined) return false
  const parts = header.split(',').map((p) => p.trim().split('=', 2) as [string, string?])
  const t = Number(parts.find(([k]) => k === 't')?.[1])
  if (!Number.isSafeInteger(t) || Math.abs(nowSeconds - t) > toleranceSec) return false
  const expected = Buffer.from(signWebhook(secret, body, t).slice(`t=${t},v1=`.length), 'hex')
  return parts.some(([k, v]) => {
    if (k !== 'v1' || v === undefined || !/^[0-9a-f]{64}$/.test(v)) return false
    return timingSafeEqual(Buffer.from(v, 'hex'), expected)
  })
}

export type DeliveryResult =
  | { readonly ok: true; readonly status: number }
  | {
      readonly ok: false
      /** Log-safe: a status line or an error code, never the response body. */
      readonly error: string
      /** From a `Retry-After` on 429/503: the receiver's own minimum wait. */
      readonly retryAfterMs?: number | undefined
    }

export interface WebhookSender {
  /** POSTs one batch; never throws. `signal` aborts it (shutdown). */
  send(events: readonly StoredAuditEvent[], signal?: AbortSignal): Promise<DeliveryResult>
}

export interface WebhookSenderOptions {
  readonly url: string
  readonly secret: string
  /** Whole-request timeout, in ms: a receiver that hangs fails the attempt. */
  readonly timeoutMs: number
  readonly clock?: Clock | undefined
}

/**
 * A sender for one webhook URL. Throws a RangeError for a URL that is not http(s) or a
 * secret shorter than `MIN_SECRET_LENGTH`.
 */
export function createWebhookSender(options: WebhookSenderOptions): WebhookSender {
  const url = new URL(options.url)
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new RangeError('events.webhookUrl must be an http:// or https:// URL')
  }
  if (options.secret.length < MIN_SECRET_LENGTH) {
    throw new RangeError(
      `events.webhookSecret must be at least ${MIN_SECRET_LENGTH} characters (required with events.webhookUrl)`,
    )
  }
  const clock = options.clock ?? systemClock
  return {
    async send(events, signal) {
      const body = webhookBody(events)
      const timeout = AbortSignal.timeout(options.timeoutMs)
      try {
        const response = await fetch(url, {
          method: 'POST',
          body,
          // Why no redirects: a signed event stream must go where the operator said, not
          // wherever the receiver (or whoever took over its DNS) points us next.
          redirect: 'manual',
          signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
          headers: {
            'content-type': 'application/json',
            'user-agent': 'tokengate-webhook/1',
            [SIGNATURE_HEADER]: signWebhook(options.secret, body, clock.now() / 1000),
            [DELIVERY_HEADER]: randomUUID(),
          },
        })
        // The body is not needed; reading it frees the connection for reuse.
        await response.arrayBuffer().catch(() => {})
        if (response.status >= 200 && response.status < 300) {
          return { ok: true, status: response.status }
        }
        return {
          ok: false,
          error: `HTTP ${response.status}`,
          retryAfterMs: retryAfterMs(response.headers.get('retry-after'), clock.now()),
        }
      } catch (error) {
        const name = (error as { name?: string }).name
        const code = (error as { cause?: { code?: string } }).cause?.code
        if (timeout.aborted) return { ok: false, error: `timeout after ${options.timeoutMs} ms` }
        return { ok: false, error: code ?? name ?? 'request failed' }
      }
    },
  }
}

/** `Retry-After` as seconds or an HTTP date, capped at one hour. */
function retryAfterMs(value: string | null, now: number): number | undefined {
  if (value === null) return undefined
  const seconds = /^\d{1,7}$/.test(value) ? Number(value) * 1000 : Date.parse(value) - now
  return Number.isFinite(seconds) && seconds > 0 ? Math.min(seconds, 3_600_000) : undefined
}
