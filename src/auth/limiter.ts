import { hash } from 'node:crypto'
import type { Config } from '../config/schema.ts'
import { credentialKindNamed } from '../core/credential-kinds.ts'
import type { LimitState } from '../core/failure.ts'
import type { RateLimitOverride } from '../core/ports.ts'
import type { Principal } from '../core/principal.ts'
import { firstConstrainsMore } from '../http/rate-limit-headers.ts'
import { addressKeyOf } from '../lib/address-key.ts'
import { fitSlots, KeyedSlots } from '../lib/keyed-slots.ts'
import { isPromiseLike, type MaybePromise, thenMaybe } from '../lib/maybe-async.ts'
import type { CounterResult, CounterStore } from './counters.ts'

export type RateLimitConfig = Config['rateLimit']
type PolicyName = 'per-token' | 'per-tenant' | 'failed-auth'

/**
 * One policy: a quota per fixed window, counted in its own child of the counter store. A
 * count is over the quota when `current > max` (this request is over the limit), the last one
 * allowed when `current === max`; its `LimitState` is built only for what is shown or refused.
 */
interface Policy {
  readonly max: number
  /** At `now` (ms): a value when the counters answer now (in-process), else a promise (Redis). */
  check(key: string, increment: boolean, now: number): MaybePromise<CounterResult>
  /** The count as the RateLimit fields and a 429 show it. */
  state(counted: CounterResult): LimitState
  /** `state(counted).remaining`, without the state. */
  remaining(counted: CounterResult): number
  /** `state(counted).resetSec`, without the state. */
  resetSec(counted: CounterResult): number
}

/** What a step of the limiter decided: go on (headers to show, if any), or refuse with 429. */
export type LimitVerdict =
  | { readonly refused: false; readonly state?: LimitState | undefined }
  | { readonly refused: true; readonly state: LimitState }

type VerdictCallback = (error: Error | null, verdict?: LimitVerdict) => void

/**
 * The rate limits, free of any HTTP framework: per token, then per tenant, after a
 * successful authentication; failed authentications per client address, checked before
 * any verification. The counters are an injected `CounterStore` (in-process or Redis).
 * Every method calls back synchronously with the in-process store, after the round trip
 * with Redis, so a request pays no promise for its limits.
 */
export interface Limiter {
  /** Whether any policy is on. */
  readonly active: boolean
  /** Whether the failed-authentication policy is on (the gate and `countFailure` do work). */
  readonly gatesFailures: boolean
  /**
   * Before authentication: an address over its failed-authentication limit is refused,
   * unless it presents a credential (by digest) that authenticated recently here.
   */
  gate(addressKey: string, digest: string | undefined, callback: VerdictCallback): void
  /**
   * `gate`, as a value when it needs no counter round trip (a known credential, in-process
   * counters), else a promise: the gate's allowed path calls these, with no callback.
   */
  admit(clientAddress: string, digest: string | undefined): MaybePromise<LimitVerdict>
  /** `countFailure`, as a value or a promise like `admit`. */
  failed(clientAddress: string, digest: string | undefined): MaybePromise<LimitVerdict>
  /** `limitPrincipal`, as a value or a promise like `admit`. */
  limit(
    principal: Principal,
    digest: string | undefined,
    tenantLimit?: RateLimitOverride | null | undefined,
  ): MaybePromise<LimitVerdict>
  /**
   * After a successful authentication: counts per token, then per tenant. A key's own rate
   * limit (`principal.limits`) replaces the per-token default, `tenantLimit` (the tenant's
   * own, when it has one) the per-tenant default; both are enforced even when the default is
   * 0 (off), as long as rate limiting is enabled.
   */
  limitPrincipal(
    principal: Principal,
    digest: string | undefined,
    callback: VerdictCallback,
    tenantLimit?: RateLimitOverride | null | undefined,
  ): void
  /**
   * After a 401: counts one failure for the address and forgets the credential. The
   * verdict's `refused` is true when this failure reached the limit (the next is refused).
   */
  countFailure(addressKey: string, digest: string | undefined, callback: VerdictCallback): void
}

/** Distinct key and tenant rate limits kept as policies (a full table starts over). */
const MAX_OVERRIDE_POLICIES = 1_000

/** Credentials that authenticated within this long may try again from a throttled address. */
const KNOWN_CREDENTIAL_MAX_AGE_MS = 3_600_000
const KNOWN_CREDENTIAL_MAX_ENTRIES = 50_000

/**
 * @param now the limiter's clock, read once per call and handed to the counters and the
 *   known-credentials set (default `Date.now`)
 */
export function createLimiter(
  config: Readonly<RateLimitConfig>,
  store: CounterStore,
  now: () => number = Date.now,
): Limiter {
  /** A policy of `settings`, counted in `counters`; undefined when switched off. */
  const policyOf = (
    name: PolicyName,
    counters: CounterStore,
    settings: { readonly max: number; readonly windowSec: number },
  ): Policy | undefined => {
    if (!config.enabled || settings.max === 0) return undefined
    const { max, windowSec } = settings
    const windowMs = windowSec * 1000
    const remaining = (counted: CounterResult) => Math.max(0, max - counted.current)
    const resetSec = (counted: CounterResult) =>
      counted.ttl > 0 ? Math.max(1, Math.ceil(counted.ttl / 1000)) : windowSec
    return {
      max,
      remaining,
      resetSec,
      check(key, increment, at) {
        const counted = counters.countNow?.(key, increment, windowMs, max, at)
        if (counted !== undefined) return counted
        return new Promise<CounterResult>((resolve, reject) => {
          const answered = (error: Error | null, result?: CounterResult) => {
            if (error || !result) reject(error ?? new Error('rate-limit store: no result'))
            else resolve(result)
          }
          if (increment) counters.incr(key, answered, windowMs, max)
          else counters.read(key, answered, windowMs, max)
        })
      },
      state: (counted) => ({
        name,
        quota: max,
        windowSec,
        remaining: remaining(counted),
        resetSec: resetSec(counted),
      }),
    }
  }

  const tokenCounters = store.child({ policy: 'per-token' })
  const tenantCounters = store.child({ policy: 'per-tenant' })
  const perToken = policyOf('per-token', tokenCounters, config.perToken)
  const perTenant = policyOf('per-tenant', tenantCounters, config.perTenant)
  const failedAuth = policyOf(
    'failed-auth',
    store.child({ policy: 'failed-auth' }),
    config.failedAuth,
  )
  // Overrides counted in the same children as the defaults, keyed with their window (a new
  // window is a new count), one policy object per distinct override (bounded: a full map
  // starts over; a policy holds no counts, only its settings).
  const overrides = new Map<string, Policy | undefined>()
  const overridden = (
    name: 'per-token' | 'per-tenant',
    limit: RateLimitOverride,
  ): Policy | undefined => {
    const id = `${name}/${limit.max}/${limit.windowSec}`
    let policy = overrides.get(id)
    if (policy === undefined) {
      if (overrides.size >= MAX_OVERRIDE_POLICIES) overrides.clear()
      policy = policyOf(name, name === 'per-token' ? tokenCounters : tenantCounters, limit)
      overrides.set(id, policy)
    }
    return policy
  }
  // The last principal's per-token key: a cached credential's principal is the same object
  // request after request (the principal memo in core/authenticators/pat.ts), so its key is
  // not built again per request.
  let lastPrincipal: Principal | undefined
  let lastKey = ''
  const lastTokenKey = (principal: Principal): string => {
    if (principal !== lastPrincipal) {
      lastKey = tokenKey(principal)
      lastPrincipal = principal
    }
    return lastKey
  }
  const known = new KnownCredentials(KNOWN_CREDENTIAL_MAX_ENTRIES, KNOWN_CREDENTIAL_MAX_AGE_MS)
  const pass: LimitVerdict = { refused: false }

  // Over the failed-authentication limit: refused before verification. Why not verify and
  // answer 429 only on failure: the limit exists to stop paying for signature checks, store
  // lookups and audit writes on behalf of a guessing client.
  const admitted = (counted: CounterResult): LimitVerdict =>
    counted.current < (failedAuth as Policy).max
      ? pass
      : { refused: true, state: (failedAuth as Policy).state(counted) }

  // `admit` and `failed` take the client address and key it (`addressKeyOf`) only when they
  // count it: a known credential's request never needs the key. The callback API's callers
  // pass the key itself (`keyed`).
  const admitAt = (
    address: string,
    keyed: boolean,
    digest: string | undefined,
  ): MaybePromise<LimitVerdict> => {
    // A credential verified recently on this instance may always try, so it skips the
    // counter read (one Redis round trip saved for returning clients). Why: an attacker
    // sharing a NAT or proxy with a legitimate token holder must not lock that holder
    // out. The key is the address, so other addresses never notice an attack either.
    if (!failedAuth) return pass
    const at = now()
    if (digest && known.has(digest, at)) return pass
    return thenMaybe(failedAuth.check(keyed ? address : addressKeyOf(address), false, at), admitted)
  }

  const failedVerdict = (counted: CounterResult): LimitVerdict => ({
    refused: counted.current === (failedAuth as Policy).max,
    state: (failedAuth as Policy).state(counted),
  })
  const failedAt = (
    address: string,
    keyed: boolean,
    digest: string | undefined,
  ): MaybePromise<LimitVerdict> => {
    if (!failedAuth) return pass
    // A credential that stopped working (revoked, expired) loses its pass at once.
    if (digest) known.forget(digest)
    return thenMaybe(
      failedAuth.check(keyed ? address : addressKeyOf(address), true, now()),
      failedVerdict,
    )
  }

  // Token first, and the tenant counted only when the token is within its limit: one
  // runaway token must not spend its tenant's allowance and starve the other tokens.
  // A policy's count is handed on with its policy; `undefined` policy: not counted.
  const afterTenant = (
    tokenPolicy: Policy | undefined,
    token: CounterResult | undefined,
    tenantPolicy: Policy | undefined,
    tenant: CounterResult | undefined,
  ): LimitVerdict => {
    if (tenant && tenant.current > (tenantPolicy as Policy).max) {
      return { refused: true, state: (tenantPolicy as Policy).state(tenant) }
    }
    // The one state shown (`mostConstraining`'s pick), built alone: not one per policy.
    if (!token)
      return tenant ? { refused: false, state: (tenantPolicy as Policy).state(tenant) } : pass
    if (!tenant) return { refused: false, state: (tokenPolicy as Policy).state(token) }
    const shown = tokenShown(tokenPolicy as Policy, token, tenantPolicy as Policy, tenant)
      ? (tokenPolicy as Policy).state(token)
      : (tenantPolicy as Policy).state(tenant)
    return { refused: false, state: shown }
  }
  const afterToken = (
    tokenPolicy: Policy | undefined,
    token: CounterResult | undefined,
    principal: Principal,
    tenantLimit: RateLimitOverride | null | undefined,
    at: number,
  ): MaybePromise<LimitVerdict> => {
    if (token && token.current > (tokenPolicy as Policy).max) {
      return { refused: true, state: (tokenPolicy as Policy).state(token) }
    }
    const tenantPolicy = tenantLimit ? overridden('per-tenant', tenantLimit) : perTenant
    if (!tenantPolicy) return afterTenant(tokenPolicy, token, undefined, undefined)
    const key = tenantLimit ? `${principal.tenantId}@${tenantLimit.windowSec}` : principal.tenantId
    const tenant = tenantPolicy.check(key, true, at)
    return isPromiseLike(tenant)
      ? afterTenantLater(tokenPolicy, token, tenantPolicy, tenant)
      : afterTenant(tokenPolicy, token, tenantPolicy, tenant)
  }
  // The continuations after a Redis round trip in functions of their own: a closure in
  // `afterToken` or `limit` would make V8 allocate a context for what it captures on every
  // call, in-process counts included.
  const afterTenantLater = (
    tokenPolicy: Policy | undefined,
    token: CounterResult | undefined,
    tenantPolicy: Policy,
    pending: PromiseLike<CounterResult>,
  ): Promise<LimitVerdict> =>
    Promise.resolve(pending).then((settled) =>
      afterTenant(tokenPolicy, token, tenantPolicy, settled),
    )
  const afterTokenLater = (
    tokenPolicy: Policy,
    pending: PromiseLike<CounterResult>,
    principal: Principal,
    tenantLimit: RateLimitOverride | null | undefined,
    at: number,
  ): Promise<LimitVerdict> =>
    Promise.resolve(pending).then((settled) =>
      afterToken(tokenPolicy, settled, principal, tenantLimit, at),
    )
  const limit = (
    principal: Principal,
    digest: string | undefined,
    tenantLimit?: RateLimitOverride | null | undefined,
  ): MaybePromise<LimitVerdict> => {
    const at = now()
    if (failedAuth && digest) known.remember(digest, at)
    const keyLimit = principal.limits?.rateLimit
    const tokenPolicy = keyLimit ? overridden('per-token', keyLimit) : perToken
    if (!tokenPolicy) return afterToken(undefined, undefined, principal, tenantLimit, at)
    const key = keyLimit ? `${tokenKey(principal)}@${keyLimit.windowSec}` : lastTokenKey(principal)
    const token = tokenPolicy.check(key, true, at)
    return isPromiseLike(token)
      ? afterTokenLater(tokenPolicy, token, principal, tenantLimit, at)
      : afterToken(tokenPolicy, token, principal, tenantLimit, at)
  }

  return {
    // On whenever rate limiting is: a key or tenant may carry its own limit.
    active: config.enabled,
    gatesFailures: failedAuth !== undefined,
    admit: (clientAddress, digest) => admitAt(clientAddress, false, digest),
    failed: (clientAddress, digest) => failedAt(clientAddress, false, digest),
    limit,

    gate(addressKey, digest, callback) {
      calledBack(() => admitAt(addressKey, true, digest), callback)
    },

    limitPrincipal(principal, digest, callback, tenantLimit) {
      calledBack(() => limit(principal, digest, tenantLimit), callback)
    },

    countFailure(addressKey, digest, callback) {
      calledBack(() => failedAt(addressKey, true, digest), callback)
    },
  }
}

/**
 * Whether the token's count is the one to show over the tenant's: `mostConstraining(token
 * state, tenant state) === token state`, read off the counts without building either state.
 */
function tokenShown(
  tokenPolicy: Policy,
  token: CounterResult,
  tenantPolicy: Policy,
  tenant: CounterResult,
): boolean {
  return firstConstrainsMore(
    tokenPolicy.remaining(token),
    tokenPolicy.resetSec(token),
    tenantPolicy.remaining(tenant),
    tenantPolicy.resetSec(tenant),
  )
}

/** A maybe-synchronous verdict handed to a callback: at once when it is there. */
function calledBack(start: () => MaybePromise<LimitVerdict>, callback: VerdictCallback): void {
  let verdict: MaybePromise<LimitVerdict>
  try {
    verdict = start()
  } catch (error) {
    callback(error as Error)
    return
  }
  if (!isPromiseLike(verdict)) {
    callback(null, verdict)
    return
  }
  Promise.resolve(verdict).then(
    (settled) => callback(null, settled),
    (error: Error) => callback(error),
  )
}

/**
 * The per-token key, as the caller's credential kind makes it (a PAT by its id, a JWT by a
 * digest of issuer, tenant and subject): never the credential itself.
 */
function tokenKey(principal: Principal): string {
  const kind = credentialKindNamed(principal.tokenType)
  if (kind !== undefined) return kind.limiterKey(principal)
  return `${principal.tokenType}:${principal.tokenId ?? principal.fingerprint}`
}

/**
 * Digests of `Authorization` values that authenticated recently on this instance, bounded
 * in count and age (least recently used dropped first): the token's SHA-256 for `Bearer <token>`
 * (the gate computes it once per request, auth/gate.ts), `credentialDigest` for anything else.
 *
 * Why it exists: once an address is over its failed-authentication limit, its unverified
 * attempts are refused before any signature check or store lookup. A legitimate caller
 * behind the same address (a shared NAT, a proxy) is told apart by presenting a credential
 * this instance has already verified; that request still goes through full authentication
 * (revocation, expiry, tenant), so this set only decides who may *try*, never who is let in.
 *
 * Why digests: a heap dump or debugger must not reveal usable tokens. A SHA-256 of a
 * high-entropy secret cannot be reversed, and a collision would only buy an attacker one
 * ordinary verification attempt.
 */
export class KnownCredentials {
  readonly #maxEntries: number
  readonly #maxAgeMs: number
  readonly #refreshMs: number
  // Digests in typed arrays (a SHA-256 hex digest packed in 32 bytes; `KeyedSlots`), the time
  // each was seen at its slot: no heap string or Map entry per remembered credential.
  readonly #seen: KeyedSlots
  #seenAt = new Float64Array(0)

  constructor(maxEntries: number, maxAgeMs: number) {
    this.#maxEntries = maxEntries
    this.#maxAgeMs = maxAgeMs
    this.#refreshMs = maxAgeMs / 64
    this.#seen = new KeyedSlots(maxEntries, 32)
  }

  /**
   * Records the digest of a header value whose credential authenticated just now. A digest
   * refreshed within the last 1/64 of the maximum age keeps its place: the recency order is
   * then approximate by under a minute, and the busiest tokens skip the reordering.
   */
  remember(digest: string, now: number): void {
    const seen = this.#seen
    // The gate asked `has` for this digest before authentication: `KeyedSlots` remembers
    // the key it last answered for, so this second lookup is a string compare.
    let slot = seen.find(digest)
    if (slot === -1) {
      if (seen.size >= this.#maxEntries) seen.delete(seen.oldest())
      slot = seen.add(digest)
      this.#seenAt = fitSlots(this.#seenAt, seen)
    } else if (now - (this.#seenAt[slot] as number) < this.#refreshMs) {
      return
    } else {
      seen.touch(slot)
    }
    this.#seenAt[slot] = now
  }

  /** Drops the digest of a header value whose credential failed (revoked or expired since). */
  forget(digest: string): void {
    const slot = this.#seen.find(digest)
    if (slot !== -1) this.#seen.delete(slot)
  }

  /** Whether the header value of this digest authenticated within the maximum age. */
  has(digest: string, now: number): boolean {
    const slot = this.#seen.find(digest)
    if (slot === -1) return false
    if (now - (this.#seenAt[slot] as number) > this.#maxAgeMs) {
      this.#seen.delete(slot)
      return false
    }
    return true
  }
}

/**
 * The digest a header value is remembered by (SHA-256, base64url). One-shot `crypto.hash`:
 * no Hash object per call, measurably cheaper than `createHash().update().digest()`.
 */
export function credentialDigest(value: string): string {
  return hash('sha256', value, 'base64url')
}

export { addressKeyOf }
