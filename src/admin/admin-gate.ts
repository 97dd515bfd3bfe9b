/**
 * The admin listener's gate: the same pipeline as the API's (`auth/gate.ts`) over the admin
 * credential kinds (`kinds/`), so an admin request gets the strict `Authorization: Bearer`
 * parse, the failed-authentication limit per address (429 before any verification once over
 * it), the one failure mapping, the one outcome recorder and request ids by the one rule,
 * instead of a second authentication pipeline of its own.
 *
 * Two surfaces, one limiter and one recorder: the API takes an admin token or an operator
 * JWT (bearer only: no cookies, so no CSRF surface); console pages take the console session
 * cookie (checked with the same origin and CSRF rules by the console).
 */

import type { FastifyRequest } from 'fastify'
import { storeAuditSink } from '../auth/audit-events.ts'
import { type CounterStore, MemoryCounters } from '../auth/counter-store.ts'
import {
  createGate,
  type Gate,
  type GateRequest,
  type Outcome,
  type Refused,
} from '../auth/gate.ts'
import { createLimiter } from '../auth/limiter.ts'
import { createOutcomeRecorder } from '../auth/outcome-recorder.ts'
import type { Config } from '../config/schema.ts'
import { authenticateWith } from '../core/authenticate.ts'
import { describeCredentialKind } from '../core/credential-kinds.ts'
import type { Clock } from '../core/ports.ts'
import type { Principal } from '../core/principal.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { quoteString, REALM } from '../http/challenge.ts'
import type { FailureResponse } from '../http/failure-response.ts'
import type { AuditStore } from '../stores/store.ts'
import type { AdminCredentialKind, AdminKindDeps } from './kinds/admin-kind.ts'
import { adminTokenKind } from './kinds/admin-token.ts'
import { consoleSessionKind } from './kinds/console-session.ts'
import { operatorJwtKind } from './kinds/operator-jwt.ts'
import type { Operator, OperatorVerifier } from './operators.ts'
import type { Session, Sessions } from './sessions.ts'

/** The API's kinds in the order they are asked: the operator JWT claims every other bearer token. */
const API_KINDS: readonly AdminCredentialKind[] = [adminTokenKind, operatorJwtKind]
const CONSOLE_KINDS: readonly AdminCredentialKind[] = [consoleSessionKind]
for (const kind of [...API_KINDS, ...CONSOLE_KINDS]) describeCredentialKind(kind)

const OFF = { max: 0, windowSec: 60 }

export interface AdminGate {
  /** An admin API request (a bearer admin token or operator JWT). */
  check(request: GateRequest): ReturnType<Gate['check']>
  /** A console page request carrying the session cookie. */
  checkConsole(request: GateRequest): ReturnType<Gate['check']>
  /** The operator an allowed outcome authenticated. */
  operatorOf(outcome: Outcome & { allowed: true }): Operator
  /** The console session an allowed `checkConsole` outcome authenticated. */
  sessionOf(outcome: Outcome & { allowed: true }): Session | undefined
}

export interface AdminGateDeps {
  readonly config: Readonly<Config>
  readonly operators: OperatorVerifier
  readonly sessions: Sessions
  readonly store: Pick<AuditStore, 'appendAudit'>
  readonly clock: Clock
  readonly log: { warn(fields: object, message: string): void }
}

export function createAdminGate(deps: AdminGateDeps): AdminGate {
  const { config, clock, log } = deps
  const byPrincipal = new WeakMap<Principal, { operator: Operator; session?: Session }>()
  const kindDeps: AdminKindDeps = {
    operators: deps.operators,
    sessions: deps.sessions,
    clock,
    remember: (principal, operator, session) =>
      byPrincipal.set(principal, session ? { operator, session } : { operator }),
  }

  // Only the failed-authentication policy: operators are few, their requests not metered.
  // Counted in this process (the admin listener runs in one).
  const rateLimit = { ...config.rateLimit, perToken: OFF, perTenant: OFF }
  const limiter = createLimiter(rateLimit, memoryCounterStore(rateLimit.localMaxKeys))
  // The one recorder: an admin 401 is audited as auth.failed (actor: the kind's fingerprint
  // of the credential, never the credential; a revoked operator JWT's rule named), an address
  // over the limit once per window as auth.throttled. No PAT use, usage count or rotation
  // reuse: no API key is involved.
  const sink = storeAuditSink(deps.store, () => clock.now())
  const recorder = createOutcomeRecorder({
    audit: {
      write: (event) =>
        void Promise.resolve(sink.write(event)).catch((error: unknown) =>
          log.warn({ err: error }, 'writing an admin audit event failed'),
        ),
    },
    patUse: { record: () => {} },
    reuse: { onFailure: () => {}, settled: async () => {} },
    clock,
    failedAuthWindowSec: config.rateLimit.failedAuth.windowSec,
  })
  const api = createGate({
    authenticate: authenticateWith(API_KINDS.map((kind) => kind.create(kindDeps))),
    limiter,
    recorder,
  })
  // Recorded, not limited: a session id is 256 random bits, and the limiter's pass for a
  // recently verified credential reads only `Authorization`, so a limit here would lock an
  // operator's browser out behind a busy address while stopping no guess.
  const pages = createGate({
    authenticate: authenticateWith(CONSOLE_KINDS.map((kind) => kind.create(kindDeps))),
    recorder,
  })

  return {
    check: (request) => api.check(request),
    checkConsole: (request) => pages.check(request),
    operatorOf: (outcome) => byPrincipal.get(outcome.principal)?.operator as Operator,
    sessionOf: (outcome) => byPrincipal.get(outcome.principal)?.session,
  }
}

/** In-process counters, one set per policy. */
function memoryCounterStore(maxKeys: number): CounterStore {
  const counters = new MemoryCounters(maxKeys)
  return {
    incr: (key, callback, windowMs) => counters.incr(key, callback, windowMs),
    read: (key, callback, windowMs) => counters.read(key, callback, windowMs),
    child: () => memoryCounterStore(maxKeys),
  }
}

/**
 * An admin request as the gate reads it (no tenant header: operators have none). A console
 * page's `Authorization` is not read: the console's credential is its session cookie; on the
 * sign-in form it is the credential pasted there, checked as the API's bearer token.
 */
export function adminGateRequest(
  request: FastifyRequest,
  surface: 'api' | 'console' | 'sign-in' = 'api',
  pasted = '',
): GateRequest {
  return {
    method: request.method,
    target: request.url,
    authorization:
      surface === 'api'
        ? readAuthHeaders(request.raw.rawHeaders).authorization
        : surface === 'sign-in'
          ? [`Bearer ${pasted}`]
          : [],
    tenantIds: [],
    clientAddress: request.ip,
    headers: request.raw.rawHeaders,
    requestId: String(request.id),
  }
}

/** The gate's refusal under the admin realm, so a client tells the two listeners apart. */
export function adminRefusal(refused: Refused): FailureResponse {
  const challenge = refused.headers['www-authenticate']
  if (challenge === undefined) return refused
  return {
    ...refused,
    headers: {
      ...refused.headers,
      'www-authenticate': challenge.replace(REALM_PARAM, ADMIN_REALM),
    },
  }
}

const REALM_PARAM = `realm=${quoteString(REALM)}`
const ADMIN_REALM = `realm=${quoteString('tokengate-admin')}`
