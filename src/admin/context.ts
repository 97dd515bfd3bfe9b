import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { storeAuditSink } from '../auth/audit-events.ts'
import { OperationRefused, type RefusalCode } from '../auth/operations.ts'
import type { PatOperationDeps } from '../auth/pat-lifecycle.ts'
import type { Config } from '../config/schema.ts'
import type { IssuerConfig } from '../core/issuer.ts'
import type { JwksStatus } from '../core/jwks.ts'
import type { JwtRevocationSet } from '../core/jwt-revocations.ts'
import type { Clock } from '../core/ports.ts'
import type { ProblemCode } from '../http/problem.ts'
import { problemResponse, sendProblemResponse } from '../http/problem-response.ts'
import type { Store } from '../stores/store.ts'
import type { AdminGate } from './admin-gate.ts'
import type { Operator, OperatorVerifier } from './operators.ts'
import type { Sessions } from './sessions.ts'

/** What the admin listener reads and acts on; all of it is the running server's own state. */
export interface AdminDeps {
  readonly config: Readonly<Config>
  readonly store: Store
  /** The running server's issuer registry: trusted issuers and their key-source health. */
  readonly issuers: {
    issuers(): readonly IssuerConfig[]
    keyStatus(): readonly JwksStatus[]
    /** Refused, unreadable and reload state (issuer-registry.ts); absent in some tests. */
    unusable?(): readonly string[]
    unreadable?(): readonly string[]
    reloadFailing?(): boolean
  }
  readonly clock: Clock
  readonly logger: Logger
  readonly tls: { readonly cert: string | Buffer; readonly key: string | Buffer } | undefined
  /** Postgres change feed state; undefined on SQLite (one process, no feed needed). */
  readonly changeFeed: () => { connected: boolean } | undefined
  /**
   * The process's JWT revocation rules (auth/jwt-revocation-feed.ts): operator JWTs and the
   * console sessions they opened are refused by them as API JWTs are. Omitted: none.
   */
  readonly jwtRevocations?: Pick<JwtRevocationSet, 'size' | 'match'> | undefined
}

/** What every admin handler gets. */
export interface AdminContext extends AdminDeps {
  readonly operators: OperatorVerifier
  readonly sessions: Sessions
  /** The admin gate: every admin API and console request is authenticated through it. */
  readonly gate: AdminGate
}

declare module 'fastify' {
  interface FastifyRequest {
    operator?: Operator
  }
}

const REFUSAL_STATUS: Readonly<Record<RefusalCode, number>> = {
  invalid_input: 400,
  lifetime_exceeded: 400,
  tenant_unknown: 404,
  token_unknown: 404,
  issuer_unknown: 404,
  revocation_unknown: 404,
  tenant_exists: 409,
  tenant_disabled: 409,
  token_revoked: 409,
  token_rotated: 409,
  token_changed: 409,
  token_disabled: 409,
}

/** The problem an expected error maps to; undefined for anything else (a 503, fail closed). */
export function problemFor(
  error: unknown,
): { status: number; code: ProblemCode; detail: string } | undefined {
  if (error instanceof OperationRefused) {
    const status = REFUSAL_STATUS[error.code]
    return {
      status,
      code: status === 404 ? 'not_found' : 'validation_failed',
      detail: error.message,
    }
  }
  // By name: the admin layer may use the stores' types only (test/architecture.test.ts).
  if (
    error instanceof Error &&
    (error.name === 'InvalidCursorError' || error.name === 'InvalidPageLimitError')
  ) {
    return { status: 400, code: 'validation_failed', detail: error.message }
  }
  return undefined
}

export function sendProblem(
  reply: FastifyReply,
  status: number,
  code: ProblemCode,
  detail: string,
  request: FastifyRequest,
  headers: Record<string, string> = {},
) {
  return sendProblemResponse(
    reply,
    problemResponse(code, detail, String(request.id), { status, headers }),
  )
}

/**
 * What an operator's request runs application-layer operations with: the operator as the
 * audit actor (with the client address and request id), events written before the answer.
 */
export function operationDeps(
  request: FastifyRequest,
  operator: Operator,
  ctx: Pick<AdminDeps, 'store' | 'clock' | 'config'>,
): PatOperationDeps & { readonly store: Store } {
  return {
    patPolicy: ctx.config.pat,
    store: ctx.store,
    clock: ctx.clock,
    actor: { actor: operator.actor, clientAddress: request.ip, requestId: String(request.id) },
    audit: storeAuditSink(ctx.store, () => ctx.clock.now()),
  }
}
