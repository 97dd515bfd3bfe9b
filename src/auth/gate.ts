/**
 * The gate: the one request pipeline every front end runs (the server and `tokengate/fastify`,
 * Express, Hono, `node:http`, the gateway, the forward-auth decision API). A front end reads
 * a `GateRequest` from its framework, calls `check`, and applies the `Outcome`; it never
 * sequences these steps itself:
 *
 * 1. `readCredential`: the token and its digest, read once (when the limiter or the recorder
 *    keys by it; a bare gate leaves the hashing to the kind that claims the token, so a
 *    malformed one is refused without a SHA-256);
 * 2. `gateFailedAuth`: an address over its failed-authentication limit gets 429 before any
 *    verification (unless it presents a credential verified here recently);
 * 3. `authenticate`: the credential kinds of core/ (401, or 503 when a store is down);
 * 4. `refuseSecondMethod`: the token also sent as `?access_token` (400, RFC 6750 §2); after
 *    authentication, so that an invalid token is still a 401 (SPEC §5.3 rule 4);
 * 5. `quota`: a key with a quota spends one use (429 `quota_exhausted` once spent);
 * 6. `limit`: per token, then per tenant (429), a key's or tenant's own limit in place of
 *    the default; a request refused here gives its quota use back;
 * 7. `authorize`: the route's permissions, or the gateway policy (403, 404, 400);
 * 8. `identity`: for a request bound upstream, the identity headers (and signed token).
 *
 * Every outcome, allowed or refused, reaches the one recorder (`outcome-recorder.ts`) before
 * `check` returns: no front end can answer without the audit. A step that needs no I/O
 * answers synchronously, so a cached PAT or JWT is decided without a promise.
 */
import { hash } from 'node:crypto'
import type { AuthenticateMaybeSync } from '../core/authenticate.ts'
import { credentialKindNamed, maybeSyncOf } from '../core/authenticate.ts'
import { authorize as authorizePermissions } from '../core/authorize.ts'
import type { AuthFailure } from '../core/failure.ts'
import type { Quota, RateLimitOverride } from '../core/ports.ts'
import type { AuthResult, Principal } from '../core/principal.ts'
import type { TokenDigest } from '../core/raw-headers.ts'
import type { RequestClock } from '../core/request-clock.ts'
import { withScheme } from '../http/challenge.ts'
import { type FailureResponse, failureResponse } from '../http/failure-response.ts'
import { identityHeaders } from '../http/identity-headers.ts'
import { ONE_METHOD_FAILURE, queryHasAccessToken } from '../http/one-method.ts'
import { rateLimitHeaders } from '../http/rate-limit-headers.ts'
import { isPromiseLike, type MaybePromise } from '../lib/maybe-async.ts'
import { credentialDigest, type Limiter, type LimitVerdict } from './limiter.ts'
import type { Allowed, GateRequest, Outcome, Refused } from './outcome.ts'
import type { Answer, OutcomeRecorder } from './outcome-recorder.ts'
import type { PolicyMatcher } from './policy/matcher.ts'
import type { RequestTracing } from './request-span.ts'

export type { Access, Allowed, GateRequest, Outcome, Refused } from './outcome.ts'

export interface Gate {
  /** Runs the pipeline for one request; a value when no step had to wait, else a promise. */
  check(request: GateRequest): MaybePromise<Outcome>
  /**
   * A later permission check of an allowed request (an Express or Hono route's
   * `requirePermission`, a built-in route that decides from its parameters): the refusal,
   * recorded like the gate's own, or undefined when every permission is held.
   */
  authorize(
    request: GateRequest,
    principal: Principal,
    required: readonly string[],
  ): Refused | undefined
  /**
   * A refusal found outside the gate's steps (the token also in a form body, read by the
   * Fastify binding only when the route takes one), recorded like the gate's own.
   */
  refuse(request: GateRequest, failure: AuthFailure, principal: Principal | null): Refused
  /**
   * A refusal with its own problem, decided outside the gate's steps (the decision
   * listener's bad request line, the gateway's in-flight caps): audited through the recorder.
   */
  recordRefusal?(request: GateRequest, response: FailureResponse, principal: Principal | null): void
  /** Records an answered request (metrics, request log): set when the recorder wants them. */
  readonly recordAnswer?: ((answer: Answer) => void) | undefined
  /** With tracing on: the spans of requests, started and ended by the edge (edge.ts). */
  readonly tracing?: RequestTracing | undefined
}

export interface GateDeps {
  /** The credential kinds (`createMaybeSyncAuthenticator`, or the library user's own). */
  readonly authenticate: AuthenticateMaybeSync
  /** Rate limits and the failed-authentication gate; omitted: no limits. */
  readonly limiter?: Limiter | undefined
  /** Audit, reuse detection, last-used times, metrics; omitted: nothing is recorded. */
  readonly recorder?: OutcomeRecorder | undefined
  /** Signs the identity token sent upstream with the identity headers (identity-token.ts). */
  readonly identityToken?:
    | { sign(principal: Principal, audience: string | undefined): Promise<string> }
    | undefined
  /** A tenant's own rate limit, if it has one (read from the cached tenant); optional. */
  readonly tenantLimit?:
    | ((tenantId: string) => MaybePromise<RateLimitOverride | null | undefined>)
    | undefined
  /** With tracing on: the spans the edge starts for requests; omitted: none. */
  readonly tracing?: RequestTracing | undefined
  /**
   * The clock the lookups, limiter, recorder and usage counts read, pinned for each request
   * while `check` runs synchronously; omitted: each of them reads its own clock.
   */
  readonly clock?: RequestClock | undefined
  /** Spends keys' quotas (`quota-counter.ts`); omitted: quotas are not enforced. */
  readonly quotas?:
    | {
        take(quota: Quota): MaybePromise<AuthFailure | undefined>
        giveBack(quota: Quota): void
      }
    | undefined
}

/** What one run of the pipeline has learnt so far. */
interface Run {
  readonly request: GateRequest
  readonly digest: TokenDigest | undefined
  /** The credential's key for the limiter's known-credentials set. */
  readonly credentialKey: string | undefined
  principal: Principal | null
  /** The RateLimit state shown on the response. */
  headers: Readonly<Record<string, string>>
  identity: Readonly<Record<string, string>> | undefined
  /** Nanoseconds spent authenticating, when the recorder times it. */
  authenticationNs: bigint | undefined
  /** The kind that claimed a refused request, and its credential (for the fingerprint). */
  claimed: { readonly kind: string; readonly credential: string } | undefined
}

/** A step's verdict: go on (undefined), or the failure to answer. */
type StepResult = MaybePromise<AuthFailure | undefined>
type Step = (run: Run) => StepResult
/** The steps `step` runs, 0 to 6 (gateFailedAuth … identity, as the module comment lists). */
const STEP_COUNT = 7

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({})
/** A refusal after the gate allowed the request: its usage moves from allowed. */
const AFTER_ALLOWED = Object.freeze({
  digest: undefined,
  authenticationNs: undefined,
  claimed: undefined,
  afterAllowed: true,
})

export function createGate(deps: GateDeps): Gate {
  const authenticateInput = maybeSyncOf(deps.authenticate)
  const { limiter, recorder, identityToken, tenantLimit, quotas, clock } = deps
  const gatesFailures = limiter?.gatesFailures === true
  const limits = limiter?.active === true
  const timed = recorder?.timesAuthentication === true
  // The limiter's known-credentials key and the recorder's refused fingerprints need the
  // digest; without either, the kinds hash only a token that passed their format check.
  const digestsUpFront = gatesFailures || recorder !== undefined

  const gateFailedAuth: Step = (run) => {
    if (!gatesFailures) return undefined
    return thenStep(
      (limiter as Limiter).admit(run.request.clientAddress, run.credentialKey),
      admitted,
    )
  }

  const authenticate: Step = (run) => {
    const { request } = run
    const started = timed ? process.hrtime.bigint() : undefined
    // The request itself is what the kinds read (a `CredentialRequest`); the digest read up
    // front goes beside it, not in a copy of it.
    const result = authenticateInput(request, run.digest)
    // A closure only when the kind has to wait (a store lookup, a remote key).
    return isPromiseLike(result)
      ? authenticatedLater(run, result, started)
      : authenticated(run, result, started)
  }

  const refuseSecondMethod: Step = (run) =>
    queryHasAccessToken(run.request.target) ? ONE_METHOD_FAILURE : undefined

  // No closure per request on the synchronous path (in-process counters): `run` is passed on.
  const limited = (run: Run, verdict: LimitVerdict): AuthFailure | undefined => {
    if (verdict.refused) {
      const keyQuota = run.principal?.limits?.quota
      if (keyQuota && quotas) quotas.giveBack(keyQuota)
      return { code: 'rate_limited', limit: verdict.state }
    }
    if (verdict.state) run.headers = rateLimitHeaders(verdict.state)
    return undefined
  }
  const limitedLater = (run: Run, pending: PromiseLike<LimitVerdict>): StepResult =>
    Promise.resolve(pending).then((settled) => limited(run, settled))
  const counted = (run: Run, own: RateLimitOverride | null | undefined): StepResult => {
    const verdict = (limiter as Limiter).limit(run.principal as Principal, run.credentialKey, own)
    return isPromiseLike(verdict) ? limitedLater(run, verdict) : limited(run, verdict)
  }
  const countedLater = (
    run: Run,
    pending: PromiseLike<RateLimitOverride | null | undefined>,
  ): StepResult => Promise.resolve(pending).then((settled) => counted(run, settled))
  const limit: Step = (run) => {
    if (!limits) return undefined
    if (!tenantLimit) return counted(run, undefined)
    const own = tenantLimit((run.principal as Principal).tenantId)
    return isPromiseLike(own) ? countedLater(run, own) : counted(run, own)
  }

  // Before the rate limit, so that a spent quota's refusals take no rate slot and keep
  // answering quota_exhausted with the refill time; the limit step gives back the use of a
  // request it refuses, so a request refused for its rate spends no use either.
  const quota: Step = (run) => {
    const keyQuota = run.principal?.limits?.quota
    return keyQuota && quotas ? quotas.take(keyQuota) : undefined
  }

  const authorize: Step = (run) => {
    const access = run.request.access
    if (access === undefined) return undefined
    const principal = run.principal as Principal
    if ('permissions' in access) {
      return access.permissions.length === 0
        ? undefined
        : authorizePermissions(principal, access.permissions)
    }
    return policyFailure(access.policy, run.request, principal)
  }

  const identity: Step = (run) => {
    const access = run.request.access
    if (access === undefined || !('policy' in access) || access.identity === false) {
      return undefined
    }
    const principal = run.principal as Principal
    const headers = identityHeaders(principal)
    if (!identityToken) {
      run.identity = headers
      return undefined
    }
    return signedIdentity(run, headers, identityToken.sign(principal, access.audience))
  }

  // The steps in their order. A switch of direct calls, not an array of functions: one call
  // site per step lets V8 inline it, where `steps[i](run)` was one site calling seven.
  const step = (index: number, run: Run): StepResult => {
    switch (index) {
      case 0:
        return gateFailedAuth(run)
      case 1:
        return authenticate(run)
      case 2:
        return refuseSecondMethod(run)
      case 3:
        return quota(run)
      case 4:
        return limit(run)
      case 5:
        return authorize(run)
      default:
        return identity(run)
    }
  }

  /** Runs the steps from `index` on: a value while they answer synchronously. */
  const runFrom = (run: Run, index: number): MaybePromise<Outcome> => {
    for (let i = index; i < STEP_COUNT; i++) {
      const result = step(i, run)
      if (isPromiseLike(result)) return resumeFrom(run, result, i + 1)
      if (result) return refuseRun(run, result)
    }
    const allowed: Allowed = {
      allowed: true,
      principal: run.principal as Principal,
      headers: run.headers,
      identity: run.identity,
    }
    recorder?.recordOutcome(run.request, allowed, run)
    return allowed
  }

  // Every continuation after a wait is made in a function of its own, here and in the steps:
  // a closure in the function that may wait makes V8 allocate a context for what it captures
  // on every call (per step, for runFrom's loop index), waiting or not.
  const resumeFrom = (
    run: Run,
    pending: PromiseLike<AuthFailure | undefined>,
    next: number,
  ): Promise<Outcome> =>
    Promise.resolve(pending).then((failure) =>
      failure ? refuseRun(run, failure) : runFrom(run, next),
    )

  /** A 401 counts against the address first (its RateLimit pair goes on the answer). */
  const refuseRun = (run: Run, failure: AuthFailure): MaybePromise<Refused> => {
    if (!gatesFailures || failureStatus(failure) !== 401) return refused(run, failure, run.headers)
    const counted = (limiter as Limiter).failed(run.request.clientAddress, run.credentialKey)
    const answer = (verdict: LimitVerdict) => {
      if (verdict.refused) recorder?.failedAuthLimitReached(run.request, verdict.state)
      return refused(run, failure, verdict.state ? rateLimitHeaders(verdict.state) : NO_HEADERS)
    }
    return isPromiseLike(counted) ? Promise.resolve(counted).then(answer) : answer(counted)
  }

  const refused = (
    run: Run,
    failure: AuthFailure,
    headers: Readonly<Record<string, string>>,
  ): Refused => {
    const outcome = refusal(run.request, failure, run.principal, headers, run.claimed?.kind)
    recorder?.recordOutcome(run.request, outcome, run)
    return outcome
  }

  // Both callers refuse a request `check` allowed (and recorded as allowed).
  const refuse = (
    request: GateRequest,
    failure: AuthFailure,
    principal: Principal | null,
  ): Refused => {
    const outcome = refusal(request, failure, principal, NO_HEADERS)
    recorder?.recordOutcome(request, outcome, AFTER_ALLOWED)
    return outcome
  }

  const start = (request: GateRequest): MaybePromise<Outcome> => {
    const digest = digestsUpFront ? readCredential(request.authorization) : undefined
    const run: Run = {
      request,
      digest,
      credentialKey: gatesFailures ? credentialKeyOf(request.authorization, digest) : undefined,
      principal: null,
      headers: NO_HEADERS,
      identity: undefined,
      authenticationNs: undefined,
      claimed: undefined,
    }
    return runFrom(run, 0)
  }

  return {
    // One clock reading for the steps that run before `check` answers or waits; after an
    // await the steps read the clock afresh.
    check: clock
      ? (request) => {
          const pinned = clock.pin()
          try {
            return start(request)
          } finally {
            if (pinned) clock.release()
          }
        }
      : start,
    authorize(request, principal, required) {
      const failure = authorizePermissions(principal, required)
      return failure ? refuse(request, failure, principal) : undefined
    },
    refuse,
    recordRefusal(request, response, principal) {
      recorder?.recordRefusal(request, response, principal)
    },
    recordAnswer: recorder?.recordsAnswers ? recorder.recordAnswer : undefined,
    tracing: deps.tracing,
  }
}

/** The policy's verdict as a failure; undefined when it allows the request. */
function policyFailure(
  policy: PolicyMatcher,
  request: GateRequest,
  principal: Principal,
): AuthFailure | undefined {
  const decision = policy.decide(request.method, pathOf(request.target), principal)
  switch (decision.outcome) {
    case 'allow':
      return undefined
    case 'bad_path':
      return { code: 'bad_path', detail: decision.reason }
    case 'deny':
      return decision.rule
        ? { code: 'route_denied', policyLine: decision.rule.line }
        : { code: 'route_denied' }
    case 'tenant_mismatch':
      return { code: 'tenant_path_mismatch', policyLine: decision.rule.line }
    case 'forbidden':
      return decision.failure.code === 'insufficient_permission'
        ? { ...decision.failure, policyLine: decision.rule.line }
        : decision.failure
    default:
      return decision satisfies never
  }
}

function refusal(
  request: GateRequest,
  failure: AuthFailure,
  principal: Principal | null,
  headers: Readonly<Record<string, string>>,
  claimedBy?: string,
): Refused {
  const response = failureResponse(failure, request.requestId)
  // A kind's own scheme on its refusals' challenge (Bearer for PAT and JWT).
  const scheme = credentialKindNamed(claimedBy ?? principal?.tokenType ?? '')?.challengeScheme
  const own = scheme === undefined ? response.headers : withScheme(response.headers, scheme)
  return {
    allowed: false,
    failure,
    principal,
    status: response.status,
    headers: headers === NO_HEADERS ? own : { ...own, ...headers },
    body: response.body,
  }
}

// The identity headers with the signed token, once signed: a closure in `identity` would
// cost a context on every request, bound upstream or not.
function signedIdentity(
  run: Run,
  headers: Readonly<Record<string, string>>,
  signing: Promise<string>,
): Promise<undefined> {
  return signing.then((token) => {
    run.identity = { ...headers, 'x-auth-token': token }
    return undefined
  })
}

function authenticatedLater(
  run: Run,
  pending: PromiseLike<AuthResult>,
  started: bigint | undefined,
): Promise<AuthFailure | undefined> {
  return Promise.resolve(pending).then((settled) => authenticated(run, settled, started))
}

/** Notes what authentication found on the run: the failure to answer, or undefined. */
function authenticated(
  run: Run,
  settled: AuthResult,
  started: bigint | undefined,
): AuthFailure | undefined {
  if (started !== undefined) run.authenticationNs = process.hrtime.bigint() - started
  if (!settled.ok) {
    run.claimed = settled.claimed
    return settled.failure
  }
  run.principal = settled.principal
  return undefined
}

function failureStatus(failure: AuthFailure): number {
  switch (failure.code) {
    case 'missing_authorization':
    case 'malformed_authorization':
    case 'invalid_token':
    case 'token_expired':
    case 'tenant_header_required':
    case 'tenant_mismatch':
      return 401
    default:
      return 0
  }
}

/**
 * The bearer token of a request with one `Authorization: Bearer …` header, and its SHA-256,
 * computed once: the limiter's known-credentials key, a PAT's store key and a JWT's
 * verified-token cache key are all this one digest. Not a parse: the authenticator parses
 * strictly and uses the digest only for exactly the token it parsed. Only the digest
 * outlives the request.
 */
function readCredential(authorization: readonly string[]): TokenDigest | undefined {
  const value = authorization.length === 1 ? (authorization[0] as string) : ''
  if (!value.startsWith(BEARER) || value.length === BEARER.length) return undefined
  const token = value.slice(BEARER.length)
  return { token, sha256Hex: hash('sha256', token, 'hex') }
}

const BEARER = 'Bearer '

/** The key a credential is remembered by: the token's digest, or a digest of the raw value. */
function credentialKeyOf(
  authorization: readonly string[],
  digest: TokenDigest | undefined,
): string | undefined {
  if (digest) return digest.sha256Hex
  const first = authorization[0]
  return first === undefined ? undefined : credentialDigest(first)
}

/** The failed-authentication gate's verdict as a failure; undefined when it may try. */
function admitted(verdict: LimitVerdict): AuthFailure | undefined {
  return verdict.refused ? { code: 'rate_limited', limit: verdict.state } : undefined
}

function thenStep<T>(
  value: MaybePromise<T>,
  next: (value: T) => AuthFailure | undefined,
): StepResult {
  return isPromiseLike(value) ? Promise.resolve(value).then(next) : next(value)
}

function pathOf(target: string): string {
  const q = target.indexOf('?')
  return q === -1 ? target : target.slice(0, q)
}

/**
 * What a front end is handed: a gate (`createTokengate`'s result, or the server's), or a bare
 * authenticator for apps that bring their own lookups; that one gets a gate with no limits
 * and nothing recorded.
 */
export type GateSource = Gate | { readonly authenticate: AuthenticateMaybeSync }

export function gateFrom(source: GateSource): Gate {
  return 'check' in source ? source : createGate({ authenticate: source.authenticate })
}
