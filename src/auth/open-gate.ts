/**
 * The gate of one process, composed once: one counter store (in-process or Redis), one
 * limiter, one reuse detector and one outcome recorder, shared by every listener the process
 * runs (API, gateway, decision) so that a token's budget and an address's failures are
 * counted once, whichever listener a request arrived on.
 */

import type { Config } from '../config/schema.ts'
import type { Tenant } from '../core/ports.ts'
import { RequestClock } from '../core/request-clock.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'
import {
  openUsageJournal,
  recoverUsageJournal,
  type UsageJournal,
} from '../stores/usage-journal.ts'
import { createUsageWriter } from '../stores/usage-writer.ts'
import { trackStoreWrites } from '../stores/write-health.ts'
import { type AddressThrottle, createAddressThrottle } from './address-throttle.ts'
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
import { createQuotaCounter } from './quota-counter.ts'
import { createReuseDetector } from './reuse-detector.ts'
import type { Tracing } from './tracing.ts'

export interface OpenGateOptions {
  readonly rateLimit: Readonly<Config['rateLimit']>
  readonly quota: Readonly<Config['quota']>
  readonly usage: Readonly<Config['usage']>
  readonly redisUrl?: string | undefined
  readonly log: RequestLog & {
    error(fields: object, message: string): void
    warn(fields: object, message: string): void
  }
  readonly metrics?: OutcomeMetrics | undefined
  readonly identityToken?: IdentityTokenSigner | undefined
  /**
   * With `tracing.enabled`: authentication in a span, and the edge's request spans;
   * otherwise nothing is wrapped at all.
   */
  readonly tracing?: Pick<Tracing, 'authenticate' | 'request'> | undefined
  /**
   * Where usage counts are journaled before requests are answered (usage-journal.ts), so
   * that a killed process loses none; undefined: memory only until each flush.
   */
  readonly usageJournalDir?: string | undefined
}

export interface OpenedGate {
  readonly gate: Gate
  readonly recorder: OutcomeRecorder
  /** The failed-auth limit for signature-authenticated endpoints (SSF push, leak reports). */
  readonly addressThrottle: AddressThrottle
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
  const usage = options.usage.enabled
    ? createUsageWriter(trackStoreWrites(auth.store, auth.writes), {
        clock: auth.clock,
        flushIntervalMs: options.usage.flushIntervalMs,
        maxSubjectsPerMinute: options.usage.maxKeysPerMinute,
        subjectsPerWrite: USAGE_SUBJECTS_PER_WRITE,
        ...(await usageJournal(auth, options)),
        // One log line per episode of failing writes (write-health.ts), not one per flush.
        onError: (error) => auth.writes.failed('addUsage', error),
      })
    : undefined
  const recorder = createOutcomeRecorder({
    audit: auth.audit,
    patUse: auth.patUse,
    reuse,
    clock: auth.clock,
    failedAuthWindowSec: rateLimit.failedAuth.windowSec,
    metrics: options.metrics,
    log: options.log,
    usage,
  })
  const quotas = createQuotaCounter({
    store: auth.store,
    clock: auth.clock,
    maxBlock: options.quota.maxBlock,
    recheckMs: options.quota.recheckMs,
    // The degraded mode's price (docs/limits.md): uses served on credit the store no longer had.
    onOverdraft: (counter, uses) =>
      options.log.warn(
        { counter, uses },
        'quota overdraft: uses served on credit beyond the limit',
      ),
  })
  // A request clock (createTokengate's system clock) is the limiter's too, so a request's
  // counts read the time the gate pinned; any other clock leaves the limiter on `Date.now`.
  const requestClock = auth.clock instanceof RequestClock ? auth.clock : undefined
  const limiter = counters ? createLimiter(rateLimit, counters.store, requestClock?.now) : undefined
  const addressThrottle = createAddressThrottle(limiter, {
    audit: auth.audit,
    windowSec: rateLimit.failedAuth.windowSec,
    log: options.log,
    now: () => auth.clock.now(),
  })
  const tenants = auth.lookups.maybeSync
  const gate = createGate({
    authenticate: options.tracing
      ? options.tracing.authenticate(auth.authenticate)
      : auth.authenticate,
    limiter,
    recorder,
    identityToken: options.identityToken,
    // The tenant was just read to authenticate: a cache hit, answered without a promise. A
    // failed read falls back to the default limit (limits stay on; the tenant check decided).
    tenantLimit: (tenantId) => {
      const tenant = tenants.findTenant(tenantId)
      // A branch, not `thenMaybe`: its callback call site is shared by every caller, so V8
      // calls `tenantRateLimit` through it without inlining, on every counted request.
      return isPromiseLike(tenant)
        ? Promise.resolve(tenant).then(tenantRateLimit, noTenantLimit)
        : tenant?.rateLimit
    },
    quotas,
    clock: requestClock,
    tracing: options.tracing?.request,
  })
  let closing: Promise<void> | undefined
  return {
    gate,
    recorder,
    addressThrottle,
    redisState: () => counters?.redisState(),
    close() {
      closing ??= (async () => {
        await recorder.close()
        addressThrottle.close()
        // Best effort, as the auth context's write-behind: a store already gone (closed
        // first, or down) loses unspent quota uses and the last counts, never the shutdown.
        await Promise.allSettled([quotas.close(), usage?.close()])
        counters?.close()
      })()
      return closing
    },
  }
}

const USAGE_SUBJECTS_PER_WRITE = 5_000

// The gate's `tenantLimit` callbacks after a store read, made once: no closures per request.
const tenantRateLimit = (tenant: Tenant | undefined) => tenant?.rateLimit
const noTenantLimit = () => undefined

/**
 * Adds the counts that killed processes left in the journal directory (a store that cannot
 * take them now leaves them to the usage writer, which tries again after each flush that
 * stores), then opens this process's journal.
 */
async function usageJournal(
  auth: AuthContext,
  options: OpenGateOptions,
): Promise<{ journal?: UsageJournal; recoverJournal?: () => Promise<void> }> {
  const dir = options.usageJournalDir
  if (dir === undefined) return {}
  const slicing = {
    maxSubjects: options.usage.maxKeysPerMinute,
    subjectsPerWrite: USAGE_SUBJECTS_PER_WRITE,
  }
  const recover = async () => {
    const { segments, unreadable } = await recoverUsageJournal(dir, auth.store, slicing)
    if (segments > 0 || unreadable > 0) {
      options.log.warn(
        { segments, unreadable },
        'usage counts of a killed process recovered from its journal',
      )
    }
  }
  let recoverJournal: (() => Promise<void>) | undefined
  try {
    await recover()
  } catch (error) {
    options.log.warn(
      { err: error },
      'usage journal of a killed process not recovered yet; tried again once a flush stores',
    )
    recoverJournal = recover
  }
  try {
    return { journal: openUsageJournal(dir, slicing), ...(recoverJournal && { recoverJournal }) }
  } catch (error) {
    options.log.warn(
      { err: error },
      'usage journal cannot be opened; usage counts are held in memory until each flush',
    )
    return recoverJournal ? { recoverJournal } : {}
  }
}
