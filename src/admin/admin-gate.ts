/**
 * The admin API's gate: the same pipeline as the API's (`auth/gate.ts`) over the admin
 * credential kinds, so an admin request gets the strict `Authorization: Bearer` parse, the
 * failed-authentication limit per address (429 before any verification once over it) and
 * the one failure mapping, instead of a second authentication pipeline of its own.
 *
 * Kinds: an admin token (`tga_…`, looked up by hash) and an operator JWT from the
 * configured operator issuer (every other bearer token). Console sessions are the
 * console's (cookie + same-origin check), not the API's: the API takes no cookies.
 */

import type { FastifyRequest } from 'fastify'
import { ADMIN_TOKEN_PREFIX } from '../auth/admin-tokens.ts'
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
import type { Authenticator } from '../core/credential-kind.ts'
import type { Clock } from '../core/ports.ts'
import type { AuthResult, Principal } from '../core/principal.ts'
import { readAuthHeaders } from '../core/raw-headers.ts'
import { quoteString, REALM } from '../http/challenge.ts'
import type { FailureResponse } from '../http/failure-response.ts'
import type { AuditStore } from '../stores/store.ts'
import type { Operator, OperatorVerifier } from './operators.ts'

/** The tenant id of every admin principal: no API tenant is ever named so (reserved). */
const ADMIN_TENANT = 'tokengate-admin'
const OFF = { max: 0, windowSec: 60 }

export interface AdminGate {
  check(request: GateRequest): ReturnType<Gate['check']>
  /** The operator an allowed outcome authenticated. */
  operatorOf(outcome: Outcome & { allowed: true }): Operator
}

export interface AdminGateDeps {
  readonly config: Readonly<Config>
  readonly operators: OperatorVerifier
  readonly store: Pick<AuditStore, 'appendAudit'>
  readonly clock: Clock
  readonly log: { warn(fields: object, message: string): void }
}

export function createAdminGate(deps: AdminGateDeps): AdminGate {
  const { config, operators, clock, log } = deps
  const byPrincipal = new WeakMap<Principal, Operator>()

  const verify = async (kind: string, credential: string): Promise<AuthResult> => {
    const checked = await operators.verify(credential)
    if (!checked.ok) {
      return checked.reason === 'no_role'
        ? { ok: false, failure: { code: 'insufficient_permission', required: ['read-only'] } }
        : {
            ok: false,
            failure: {
              code: 'invalid_token',
              reason: 'unknown_token',
              detail: 'The operator credential is not valid.',
            },
          }
    }
    const { operator } = checked
    const principal: Principal = Object.freeze({
      tokenType: kind,
      tenantId: ADMIN_TENANT,
      subject: operator.actor,
      permissions: [operator.role],
      tokenId: undefined,
      expiresAt: operator.expiresAt,
      // The actor (`admin:<name>`, `oidc:<sub>`): names the credential, shows none of it.
      fingerprint: operator.actor,
    })
    byPrincipal.set(principal, operator)
    return { ok: true, principal }
  }

  const adminToken: Authenticator = {
    kind: 'admin-token',
    claim: (_request, bearer) => (bearer?.startsWith(ADMIN_TOKEN_PREFIX) ? bearer : undefined),
    authenticate: (credential) => verify('admin-token', credential),
  }
  // Every other bearer token is checked as an operator JWT (and refused as one without SSO).
  const operatorJwt: Authenticator = {
    kind: 'operator-jwt',
    claim: (_request, bearer) => bearer,
    authenticate: (credential) => verify('operator-jwt', credential),
  }

  // Only the failed-authentication policy: operators are few, their requests not metered.
  // Counted in this process (the admin listener runs in one).
  const rateLimit = { ...config.rateLimit, perToken: OFF, perTenant: OFF }
  const limiter = createLimiter(rateLimit, memoryCounterStore(rateLimit.localMaxKeys))
  // The one recorder: an admin 401 is audited as auth.failed (actor: an hmac fingerprint of
  // the credential, never the credential), an address over the limit once per window as
  // auth.throttled. No PAT use, usage count or rotation reuse: no API key is involved.
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
  const gate = createGate({
    authenticate: authenticateWith([adminToken, operatorJwt]),
    limiter,
    recorder,
  })

  return {
    check: (request) => gate.check(request),
    operatorOf: (outcome) => byPrincipal.get(outcome.principal) as Operator,
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

/** An admin API request as the gate reads it (no tenant header: operators have none). */
export function adminGateRequest(request: FastifyRequest): GateRequest {
  return {
    method: request.method,
    target: request.url,
    authorization: readAuthHeaders(request.raw.rawHeaders).authorization,
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
