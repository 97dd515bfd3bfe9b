/**
 * The CAEP transmitter for our own keys: each configured receiver is a destination of the
 * event outbox (stores: `appendAudit` queues an entry per receiver, in the transaction that
 * stores the audit event), delivered by its own outbox worker, so a receiver that is down
 * is retried with backoff and loses nothing, and delays neither the webhook nor another
 * receiver. An entry becomes zero or more `credential-change` SETs (transmitter-events.ts),
 * signed when sent and pushed one per request (RFC 8935).
 */
import { readFileSync } from 'node:fs'
import type { Config } from '../config/schema.ts'
import type { Clock } from '../core/ports.ts'
import { createOutboxWorker, type OutboxWorker } from '../events/outbox-worker.ts'
import type { DeliveryResult, WebhookSender } from '../events/webhook.ts'
import type { OutboxDestination, OutboxStore } from '../stores/store.ts'
import { DELIVERY_METHOD, SET_MEDIA_TYPE } from './events.ts'
import {
  CREDENTIAL_CHANGE_AUDIT_TYPES,
  credentialChangeSet,
  credentialChangesOf,
} from './transmitter-events.ts'

export type TransmitterConfig = NonNullable<Config['ssf']['transmitter']>
type ReceiverConfig = TransmitterConfig['receivers'][number]

/** Signs a SET's claims (`typ: secevent+jwt`): the identity-token signer. */
export interface SetSigner {
  signSecurityEvent(claims: object): Promise<string>
}

/** Where a receiver finds our keys: the API listener's JWKS (served with the identity token's). */
export const JWKS_PATH = '/.well-known/jwks.json'

/**
 * The transmitter configuration metadata (SSF 1.0 §7.1), served at
 * `/.well-known/ssf-configuration`. Push only, receivers subscribed by configuration: no
 * stream management endpoints are offered (SSF makes them optional).
 */
export function ssfConfiguration(transmitter: TransmitterConfig): Record<string, unknown> {
  return {
    spec_version: '1_0',
    issuer: transmitter.issuer,
    jwks_uri: `${transmitter.issuer}${JWKS_PATH}`,
    delivery_methods_supported: [DELIVERY_METHOD.push],
    default_subjects: 'ALL',
  }
}

/** The outbox destination of a receiver: stable while its URL and audience are. */
export function destinationOf(receiver: Pick<ReceiverConfig, 'url' | 'audience'>): string {
  return `ssf ${receiver.audience} ${receiver.url}`
}

/** The outbox destinations of the configured receivers (none without a transmitter). */
export function transmitterDestinations(
  transmitter: TransmitterConfig | undefined,
): OutboxDestination[] {
  return (transmitter?.receivers ?? []).map((receiver) => ({
    name: destinationOf(receiver),
    eventTypes: CREDENTIAL_CHANGE_AUDIT_TYPES,
  }))
}

export interface SetSenderOptions {
  readonly issuer: string
  readonly receiver: ReceiverConfig
  readonly signer: SetSigner
  readonly timeoutMs: number
  readonly clock: Clock
}

/** How many delivered `jti`s a sender remembers, to skip them when a batch is retried. */
const REMEMBERED_JTIS = 10_000

/**
 * A sender for one receiver, in the outbox worker's `WebhookSender` shape: the SETs of a batch
 * are pushed in order; the first refusal fails the batch (retried later, the SETs already
 * accepted skipped while this process remembers them, else sent again with the same `jti`).
 */
export function createSetSender(options: SetSenderOptions): WebhookSender {
  const { receiver, signer, clock } = options
  const url = new URL(receiver.url)
  // Read once at start: an unreadable file fails the start, not every delivery.
  const authorization =
    receiver.authorizationHeaderFile === undefined
      ? undefined
      : readFileSync(receiver.authorizationHeaderFile, 'utf8').trim()
  const delivered = new Set<string>()
  const remember = (jti: string) => {
    delivered.add(jti)
    if (delivered.size > REMEMBERED_JTIS)
      delivered.delete(delivered.values().next().value as string)
  }

  async function push(set: string, signal: AbortSignal | undefined): Promise<DeliveryResult> {
    const timeout = AbortSignal.timeout(options.timeoutMs)
    try {
      const response = await fetch(url, {
        method: 'POST',
        body: set,
        // As for the webhook: a SET goes where the operator said, never where a redirect points.
        redirect: 'manual',
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        headers: {
          'content-type': SET_MEDIA_TYPE,
          accept: 'application/json',
          'user-agent': 'tokengate-ssf/1',
          ...(authorization ? { authorization } : {}),
        },
      })
      // RFC 8935 §2.3: a refusal's body is { err, description }; only its short code is kept.
      const text = await response.text().catch(() => '')
      if (response.status >= 200 && response.status < 300) {
        return { ok: true, status: response.status }
      }
      const code = /"err"\s*:\s*"([a-z_]{1,40})"/.exec(text)?.[1]
      return { ok: false, error: `HTTP ${response.status}${code ? ` ${code}` : ''}` }
    } catch (error) {
      if (timeout.aborted) return { ok: false, error: `timeout after ${options.timeoutMs} ms` }
      const name = (error as { name?: string }).name
      const code = (error as { cause?: { code?: string } }).cause?.code
      return { ok: false, error: code ?? name ?? 'request failed' }
    }
  }

  return {
    async send(events, signal) {
      let last: DeliveryResult = { ok: true, status: 204 }
      for (const event of events) {
        for (const change of credentialChangesOf(event)) {
          const claims = credentialChangeSet(event, change, {
            issuer: options.issuer,
            audience: receiver.audience,
            now: clock.now(),
          })
          const jti = claims.jti as string
          if (delivered.has(jti)) continue
          last = await push(await signer.signSecurityEvent(claims), signal)
          if (!last.ok) return last
          remember(jti)
        }
      }
      return last
    },
  }
}

export interface Transmitter {
  readonly workers: readonly OutboxWorker[]
  close(): Promise<void>
}

/**
 * Records the receivers as outbox destinations (an empty list without a transmitter, so
 * destinations of an earlier configuration stop being filled) and starts one outbox worker
 * per receiver, with the `events` delivery timings.
 */
export async function startTransmitter(deps: {
  readonly transmitter: TransmitterConfig | undefined
  readonly events: Readonly<Config['events']>
  readonly store: OutboxStore
  readonly signer: SetSigner | undefined
  readonly clock: Clock
  readonly log: { warn(obj: object, msg: string): void }
}): Promise<Transmitter> {
  const { transmitter, events, store, clock, log } = deps
  await store.setOutboxDestinations(transmitterDestinations(transmitter))
  const workers: OutboxWorker[] = []
  if (transmitter && transmitter.receivers.length > 0) {
    // A bug, not an operator's mistake: main.ts makes the signer whenever a transmitter is set.
    if (!deps.signer) throw new Error('ssf.transmitter: no SET signer')
    // Each SET is one request: a small batch keeps a claim shorter than its lease.
    const batchSize = Math.min(events.batchSize, 10)
    for (const receiver of transmitter.receivers) {
      const sender = createSetSender({
        issuer: transmitter.issuer,
        receiver,
        signer: deps.signer,
        timeoutMs: events.timeoutMs,
        clock,
      })
      workers.push(
        createOutboxWorker({
          store,
          sender,
          destination: destinationOf(receiver),
          clock,
          batchSize,
          pollIntervalMs: events.pollIntervalMs,
          retryInitialMs: events.retryInitialMs,
          retryMaxMs: events.retryMaxMs,
          leaseMs: events.timeoutMs * (batchSize + 1) + 30_000,
          log,
        }),
      )
    }
  }
  for (const worker of workers) worker.start()
  return {
    workers,
    async close() {
      await Promise.all(workers.map((worker) => worker.close()))
    },
  }
}
