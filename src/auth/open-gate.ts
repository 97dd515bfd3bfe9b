/**
 * The gate of one process, composed once: one counter store (in-process or Redis), one
 * limiter, one reuse detector and one outcome recorder, shared by every listener the process
 * runs (API, gateway, decision) so that a token's budget and an address's failures are
 * counted once, whichever listener a request arrived on.
 */
import type { Config } from '../config/schema.ts'
import type { AuthContext } from './auth-context.ts'
import { openCounterStore, type RedisState } from './counter-store.ts'
import { createGate, type Gate } from './gate.ts'
import type { IdentityTokenSigner } from './identity-token.ts'
import { createLimiter } from './limiter.ts'
import {
  createOutcomeRecorder,
  type OutcomeMetrics,
  type OutcomeRecorder,
  type RequestLog,
} from './outcome-recorder.ts'
import { createReuseDetector } from './reuse-detector.ts'
import type { Tracing } from './tracing.ts'

export interface OpenGateOptions {
  readonly rateLimit: Readonly<Config['rateLimit']>
  readonly redisUrl?: string | undefined
  readonly log: RequestLog & { error(fields: object, message: string): void }
  readonly metrics?: OutcomeMetrics | undefined
  readonly traffic?: { record(status: number): void } | undefined
  readonly identityToken?: IdentityTokenSigner | undefined
  /** With `tracing.enabled`: authentication in a span; otherwise it is not wrapped at all. */
  readonly tracing?: Pick<Tracing, 'authenticate'> | undefined
}

export interface OpenedGate {
  readonly gate: Gate
  readonly recorder: OutcomeRecorder
  /** Whether the rate-limit counters are in Redis right now (readiness); undefined: no Redis. */
  redisState(): RedisState
  /** Writes pending audit aggregates, settles revocations, disconnects Redis. */
  close(): Promise<void>
}

export async function openGate(auth: AuthContext, options: OpenGateOptions): Promise<OpenedGate> {
  const { rateLimit } = options
  const counters = rateLimit.enabled
    ? await openCounterStore({
        redisUrl: options.redisUrl,
        redisPrefix: rateLimit.redisPrefix,
        redisTimeoutMs: rateLimit.redisTimeoutMs,
        localMaxKeys: rateLimit.localMaxKeys,
        log: options.log,
      })
    : undefined
  const reuse = createReuseDetector({
    store: auth.store,
    audit: auth.audit,
    clock: auth.clock,
    log: options.log,
  })
  const recorder = createOutcomeRecorder({
    audit: auth.audit,
    patUse: auth.patUse,
    reuse,
    clock: auth.clock,
    failedAuthWindowSec: rateLimit.failedAuth.windowSec,
    metrics: options.metrics,
    log: options.log,
    traffic: options.traffic,
  })
  const gate = createGate({
    authenticate: options.tracing
      ? options.tracing.authenticate(auth.authenticate)
      : auth.authenticate,
    limiter: counters ? createLimiter(rateLimit, counters.store) : undefined,
    recorder,
    identityToken: options.identityToken,
  })
  let closing: Promise<void> | undefined
  return {
    gate,
    recorder,
    redisState: () => counters?.redisState(),
    close() {
      closing ??= (async () => {
        await recorder.close()
        counters?.close()
      })()
      return closing
    },
  }
}
