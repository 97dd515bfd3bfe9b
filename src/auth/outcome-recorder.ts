/**
 * The one place an outcome is recorded. The gate calls `recordOutcome` for every decision
 * it makes (audit, rotation-reuse detection, last-used times, usage counts by outcome, the
 * authentication-latency metric); each front end calls `recordAnswer` once per answered request (the request
 * counter by outcome code and status, the log line). No front
 * end writes an audit event or a metric of an outcome itself, so none can skip one.
 */

import { credentialKindNamed } from '../core/credential-kinds.ts'
import type { AuthFailure, LimitState, QuotaState } from '../core/failure.ts'
import { hmacFingerprint } from '../core/fingerprint.ts'
import type { Clock } from '../core/ports.ts'
import type { Principal } from '../core/principal.ts'
import type { TokenDigest } from '../core/raw-headers.ts'
import type { FailureResponse } from '../http/failure-response.ts'
import { loggablePath } from '../http/log-safe.ts'
import type { UsageOutcome, UsageWriter } from '../stores/usage-writer.ts'
import type { AuditWriter, PatUseRecorder } from '../stores/write-behind.ts'
import { auditRecord, authFailureRecord } from './audit-events.ts'
import { createRefusalRecorder } from './failed-auth-refusals.ts'
import type { GateRequest, Outcome } from './outcome.ts'
import type { ReuseDetector } from './reuse-detector.ts'

/** The listener an answer went out on: metrics count the API's and the decisions apart. */
export type Listener = 'api' | 'decision'

/** One answered request, as a front end reports it after the response is sent. */
export interface Answer {
  readonly listener: Listener
  readonly method: string
  /** The request target as received (only its path, tokens redacted, is logged). */
  readonly target: string
  readonly requestId: string
  readonly status: number
  readonly durationMs: number
  /** The gate's outcome, when the gate decided this request. */
  readonly outcome: Outcome | undefined
}

/** What the gate learnt while deciding, besides the outcome. */
export interface DecisionFacts {
  /** The request's bearer token digest (its fingerprint is made from it, never the token). */
  readonly digest: TokenDigest | undefined
  /** Nanoseconds spent authenticating, when `timesAuthentication`. */
  readonly authenticationNs: bigint | undefined
  /** The kind that claimed a refused request and its credential (for its fingerprint). */
  readonly claimed: { readonly kind: string; readonly credential: string } | undefined
  /**
   * A refusal of a request the gate had allowed (a route's later permission check): its
   * usage moves from allowed to the refusal, so each request is counted once.
   */
  readonly afterAllowed?: boolean | undefined
}

/** The metrics the recorder writes (server/metrics.ts implements them with prom-client). */
export interface OutcomeMetrics {
  /** `tokenType`: the credential kind's name, `none` (no credential) or `malformed`. */
  observeAuthentication(tokenType: string, code: string, seconds: number): void
  countAnswer(listener: Listener, code: string, status: number, limit: string | undefined): void
}

export interface RequestLog {
  isLevelEnabled(level: string): boolean
  info(fields: object, message: string): void
  warn(fields: object, message: string): void
}

export interface OutcomeRecorderDeps {
  readonly audit: Pick<AuditWriter, 'write'>
  readonly patUse: Pick<PatUseRecorder, 'record'>
  readonly reuse: ReuseDetector
  readonly clock: Clock
  /** The failed-authentication window: refusals are audited once per address and window. */
  readonly failedAuthWindowSec: number
  readonly metrics?: OutcomeMetrics | undefined
  readonly log?: RequestLog | undefined
  /** Requests by outcome per key, tenant and in all (cluster-wide, written behind). */
  readonly usage?: Pick<UsageWriter, 'count' | 'uncount'> | undefined
}

export interface OutcomeRecorder {
  /** Whether the gate should time authentication (only when a metric records it). */
  readonly timesAuthentication: boolean
  /** Whether front ends need to report answers at all (metrics, request log). */
  readonly recordsAnswers: boolean
  recordOutcome(request: GateRequest, outcome: Outcome, facts: DecisionFacts): void
  /** An address just reached its failed-authentication limit (logged once per window). */
  failedAuthLimitReached(request: GateRequest, state: LimitState): void
  recordAnswer(answer: Answer): void
  /**
   * A refusal with its own problem, decided before or beside the gate's steps (the decision
   * listener's bad request line, the gateway's in-flight caps): one `auth.refused` row.
   * `principal` is given only for a request the gate allowed (the caps): its usage then
   * counts the refusal (429 limited; 503 nothing) instead of the allow.
   */
  recordRefusal(request: GateRequest, response: FailureResponse, principal: Principal | null): void
  /** Writes pending aggregates and waits for revocations under way (shutdown). */
  close(): Promise<void>
}

export function createOutcomeRecorder(deps: OutcomeRecorderDeps): OutcomeRecorder {
  const { audit, patUse, reuse, clock, metrics, usage } = deps
  const log = deps.log?.isLevelEnabled('info') ? deps.log : undefined
  const refusals = createRefusalRecorder({
    windowSec: deps.failedAuthWindowSec,
    write: (event) =>
      audit.write(
        auditRecord(
          {
            type: 'auth.throttled',
            tenantId: null,
            outcome: 'rate_limited',
            details: { refused: event.refused, windowSec: event.windowSec },
          },
          { actor: null, clientAddress: event.clientAddress, requestId: event.requestId },
        ),
      ),
  })

  const exhaustedQuotas = createExhaustionAudit(audit)

  return {
    timesAuthentication: metrics !== undefined,
    recordsAnswers: metrics !== undefined || log !== undefined,

    recordOutcome(request, outcome, facts) {
      if (facts.authenticationNs !== undefined && metrics) {
        metrics.observeAuthentication(
          outcome.principal?.tokenType ?? tokenTypeOf(facts, request),
          outcome.allowed ? 'ok' : outcome.failure.code,
          Number(facts.authenticationNs) / 1e9,
        )
      }
      if (outcome.allowed) {
        const { principal } = outcome
        const key = storedKeyOf(principal)
        if (key !== null) patUse.record(key, clock.now())
        usage?.count('allowed', principal.tenantId, key)
        return
      }
      const { failure, principal } = outcome
      if (usage) countRefusal(usage, outcome.status, failure, principal, facts.afterAllowed)
      if (failure.code === 'quota_exhausted') {
        if (principal?.tokenId) exhaustedQuotas.record(principal, failure.quota, request)
        return
      }
      if (failure.code === 'rate_limited') {
        // A throttled address is audited once per window, with a count: the limit exists to
        // stop paying per request on behalf of a guessing client.
        if (failure.limit.name === 'failed-auth') {
          refusals.record(request.clientAddress, request.requestId)
        }
        return
      }
      // A refused caller's fingerprint: the verified one after authentication, else the raw
      // credential's, never the credential itself.
      const actor = principal?.fingerprint ?? credentialFingerprint(facts)
      const record = authFailureRecord(failure, {
        actor,
        clientAddress: request.clientAddress,
        requestId: request.requestId,
        method: request.method,
        url: request.target,
        tenantId: principal?.tenantId ?? null,
      })
      if (record === undefined) return
      audit.write(record)
      // The record names the actor, address and request id the detector's audit wants.
      reuse.onFailure(failure, record)
    },

    failedAuthLimitReached(request, state) {
      deps.log?.warn(
        { clientAddress: request.clientAddress, policy: state.name, windowSec: state.windowSec },
        'failed-authentication limit reached; unverified attempts from this address get 429',
      )
    },

    recordRefusal(request, response, principal) {
      // A principal: the gate had allowed the request (the gateway's in-flight caps), so its
      // usage moves from allowed to the answer, as a route's later refusal does.
      if (usage && principal) {
        const tokenId = storedKeyOf(principal)
        usage.uncount('allowed', principal.tenantId, tokenId)
        const outcome = USAGE_OF_STATUS[response.status]
        if (outcome !== undefined) usage.count(outcome, principal.tenantId, tokenId)
      }
      audit.write(
        auditRecord(
          {
            type: 'auth.refused',
            tenantId: principal?.tenantId ?? null,
            outcome: response.body.code,
            details: {
              method: request.method,
              path: loggablePath(request.target),
              status: response.status,
            },
          },
          {
            actor: principal?.fingerprint ?? null,
            clientAddress: request.clientAddress,
            requestId: request.requestId,
          },
        ),
      )
    },

    recordAnswer(answer) {
      const { outcome, status } = answer
      const failure = outcome && !outcome.allowed ? outcome.failure : undefined
      const code =
        failure?.code ?? (status < 400 ? 'ok' : (STATUS_CODES[status] ?? `http_${status}`))
      metrics?.countAnswer(
        answer.listener,
        code,
        status,
        failure?.code === 'rate_limited' ? failure.limit.name : undefined,
      )
      if (!log) return
      const principal = outcome?.principal ?? undefined
      log.info(
        {
          reqId: answer.requestId,
          method: answer.method,
          path: loggablePath(answer.target),
          status,
          ms: Math.round(answer.durationMs * 100) / 100,
          auth: principal?.fingerprint,
          tenant: principal?.tenantId,
          code: failure?.code,
          // The precise reason of a refused token (docs/errors.md): the body has only its
          // client-safe detail. A fixed word, never token or key material.
          reason: failure !== undefined && 'reason' in failure ? failure.reason : undefined,
        },
        'request',
      )
    },

    async close() {
      refusals.close()
      await reuse.settled()
    },
  }
}

const USAGE_OF_STATUS: Readonly<Record<number, UsageOutcome>> = {
  401: 'unauthorized',
  403: 'forbidden',
  429: 'limited',
}

/**
 * A refusal's usage: 401, 403 and 429 are counted (other refusals, 400/404/503, are not
 * outcomes of a key), against the caller when authenticated, else against the stored key a
 * refused PAT named (revoked, expired, disabled), else in the total only. A refusal of a
 * request the gate had allowed first takes back its `allowed` count.
 */
function countRefusal(
  usage: Pick<UsageWriter, 'count' | 'uncount'>,
  status: number,
  failure: AuthFailure,
  principal: Principal | null,
  afterAllowed: boolean | undefined,
): void {
  const key = 'key' in failure ? failure.key : undefined
  const tenantId = principal?.tenantId ?? key?.tenantId ?? null
  const tokenId = principal === null ? (key?.tokenId ?? null) : storedKeyOf(principal)
  if (afterAllowed) usage.uncount('allowed', tenantId, tokenId)
  const outcome = USAGE_OF_STATUS[status]
  if (outcome === undefined) return
  usage.count(outcome, tenantId, tokenId)
}

/**
 * Audits `pat.quota_exhausted` once per key and period, however many requests the spent
 * quota then refuses (bounded; a full set starts over, at worst auditing a key twice).
 */
function createExhaustionAudit(audit: Pick<AuditWriter, 'write'>) {
  const seen = new Set<string>()
  return {
    record(principal: Principal, quota: QuotaState, request: GateRequest) {
      const id = `${principal.tokenId}\n${quota.resetsAt}`
      if (seen.has(id)) return
      if (seen.size >= MAX_EXHAUSTED_REMEMBERED) seen.clear()
      seen.add(id)
      audit.write(
        auditRecord(
          {
            type: 'pat.quota_exhausted',
            tenantId: principal.tenantId,
            outcome: 'quota_exhausted',
            details: {
              tokenId: principal.tokenId as string,
              limit: quota.limit,
              refill: quota.refill,
              resetsAt: quota.resetsAt === null ? null : new Date(quota.resetsAt).toISOString(),
            },
          },
          {
            actor: principal.fingerprint,
            clientAddress: request.clientAddress,
            requestId: request.requestId,
          },
        ),
      )
    },
  }
}

const MAX_EXHAUSTED_REMEMBERED = 10_000

/** Codes of answers the gate did not decide (a route's 404, a proxy's 502), by status. */
const STATUS_CODES: Readonly<Record<number, string>> = {
  400: 'validation_failed',
  403: 'insufficient_permission',
  404: 'not_found',
  408: 'request_timeout',
  413: 'payload_too_large',
  429: 'rate_limited',
  500: 'internal_error',
  502: 'bad_gateway',
  503: 'unavailable',
  504: 'gateway_timeout',
}

/** The stored key a principal's use is counted against, as its kind says (a PAT's id). */
function storedKeyOf(principal: Principal): string | null {
  return credentialKindNamed(principal.tokenType)?.storedKeyId(principal) ?? null
}

/** The metric label of a refused request: the kind that claimed it, else what was sent. */
function tokenTypeOf(facts: DecisionFacts, request: GateRequest): string {
  if (facts.claimed) return facts.claimed.kind
  return request.authorization.length === 0 ? 'none' : 'malformed'
}

/**
 * The fingerprint of a refused request's credential, as the kind that claimed it makes it.
 * A JWT's needs its header and payload decoded, which a flood of one refused token would
 * repeat per request, so fingerprints are kept by digest (bounded; a full map starts over;
 * digests and fingerprints only, never a credential). A bearer value no kind claimed (a
 * malformed one) gets an `hmac:` fingerprint.
 */
function credentialFingerprint(facts: DecisionFacts): string | null {
  const { claimed, digest } = facts
  if (claimed === undefined && digest === undefined) return null
  const credential = claimed?.credential ?? (digest as TokenDigest).token
  const sha256Hex = digest?.token === credential ? digest.sha256Hex : undefined
  let fingerprint = sha256Hex === undefined ? undefined : refusedFingerprints.get(sha256Hex)
  if (fingerprint !== undefined) return fingerprint
  // Not remembered: made by the kind that claimed it (no closure per refused request).
  const kind = claimed && credentialKindNamed(claimed.kind)
  fingerprint = kind
    ? kind.fingerprint(credential, sha256Hex)
    : hmacFingerprint(credential, sha256Hex)
  if (sha256Hex !== undefined) {
    if (refusedFingerprints.size >= MAX_REFUSED_FINGERPRINTS) refusedFingerprints.clear()
    refusedFingerprints.set(sha256Hex, fingerprint)
  }
  return fingerprint
}

const refusedFingerprints = new Map<string, string>()
const MAX_REFUSED_FINGERPRINTS = 1_000
