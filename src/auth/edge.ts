/**
 * The edge: what every front end does around the gate, written once (DESIGN "Shape", #33).
 * A binding translates its framework's request into an `EdgeInput`, calls `enter`, and
 * applies the `Entry`; it decides nothing itself:
 *
 * 1. scope: only requests under the gated prefix are the gate's (others pass untouched);
 * 2. the request id (`requestIdFor`: http/request-id.ts's rule and the process's one
 *    generator; every listener asks here, none makes its own);
 * 3. the preflight rule (http/preflight.ts): answered 204 or handed on, never authenticated;
 * 4. `gate.check`, with the peer's certificate and the raw headers;
 * 5. the form-body check (RFC 6750 §2): an allowed form request's body is to be read (by
 *    the binding, its framework's way, handed on unchanged) and given to `formRefusal`;
 * 6. `answered`: the answer recorded once (metrics, request log) through the gate's recorder.
 *
 * Tracing (`tracing.enabled`, tracing.ts) is here too: a gated request's span starts before
 * the check (authentication and the store lookups are its children) and ends in `answered`,
 * or as aborted when its connection closes first (request-span.ts `endedOnClose`);
 * the decision listeners (HTTP and gRPC) start theirs with `span` and answer through an edge
 * of theirs, so every front end traces the same way.
 */
import type { Socket } from 'node:net'
import type { AuthFailure } from '../core/failure.ts'
import type { Principal } from '../core/principal.ts'
import { headerValues, readAuthHeaders } from '../core/raw-headers.ts'
import { pathOf } from '../http/api-path.ts'
import type { FailureResponse } from '../http/failure-response.ts'
import { isFormContentType } from '../http/form-body.ts'
import { formHasAccessToken, ONE_METHOD_FAILURE } from '../http/one-method.ts'
import { peerCertificateOf } from '../http/peer-certificate.ts'
import { isPreflightOf, PREFLIGHT_ANSWER, type PreflightRule } from '../http/preflight.ts'
import { requestIdOf } from '../http/request-id.ts'
import { isPromiseLike, type MaybePromise } from '../lib/maybe-async.ts'
import { type EdgeHeaders, readEdgeHeaders } from './edge-headers.ts'
import {
  type Access,
  type Gate,
  type GateRequest,
  type GateSource,
  gateFrom,
  type Outcome,
  type Refused,
} from './gate.ts'
import type { Answer, Listener } from './outcome-recorder.ts'
import {
  endedOnClose,
  type RequestConnection,
  type RequestSpan,
  type RequestSpanName,
} from './request-span.ts'

export type { RequestSpan, RequestTracing } from './request-span.ts'
export { PREFLIGHT_ANSWER, type PreflightRule }

/**
 * The request id of a request, for every listener: the caller's safe `X-Request-Id`, or a
 * new one from the process's one generator (both in http/request-id.ts).
 */
export function requestIdFor(header: string | readonly string[] | null | undefined): string {
  return requestIdOf(header)
}

export interface EdgeOptions {
  /**
   * Requests whose path starts with this (or equals it without its last `/`) are gated;
   * others pass untouched. Default: every request that reaches the binding.
   */
  readonly prefix?: string | undefined
  /** A CORS preflight under the prefix: answered 204 (default) or handed on unchecked. */
  readonly preflight?: PreflightRule | undefined
  /** The listener answers are counted under. Default `api`. */
  readonly listener?: Listener | undefined
}

/** One request as a binding reads it off its framework, before anything is decided. */
export interface EdgeInput {
  readonly method: string
  /** The origin-form target as received (path and query). */
  readonly target: string
  /** Node's `rawHeaders` (`[name, value, ...]`): duplicates stay visible. */
  readonly rawHeaders: readonly string[]
  readonly clientAddress: string
  /** The connection: a TLS client certificate; its close aborts the request's span. */
  readonly socket?: (Pick<Socket, 'remoteAddress'> & RequestConnection) | undefined
  /** A request id decided already (Fastify's `genReqId` calls `requestIdFor`). */
  readonly requestId?: string | undefined
  /** Whether the framework's router matched a route under the prefix (Fastify). */
  readonly routeGated?: boolean | undefined
  /** The matched route's pattern (Fastify), for the request's span. */
  readonly route?: string | undefined
  readonly access?: Access | undefined
}

/** What the binding does with a request. */
export type Entry =
  /** Not the gate's: hand it on untouched. */
  | { readonly type: 'outside' }
  /** A preflight: answer `answer` (204), or hand it on when undefined. */
  | {
      readonly type: 'preflight'
      readonly requestId: string
      readonly answer: typeof PREFLIGHT_ANSWER | undefined
    }
  /**
   * Checked: a refusal to write, or allowed; `readsForm`: read the form body and ask
   * `formRefusal` before handing the request on.
   */
  | {
      readonly type: 'checked'
      readonly requestId: string
      readonly request: GateRequest
      readonly outcome: Outcome
      readonly readsForm: boolean
      /**
       * The request's span (tracing on): hand it to `answered`; a binding runs the rest of
       * the request in `span.run` so that its spans (the gateway's upstream) are children.
       */
      readonly span: RequestSpan | undefined
    }

/** One answered request, reported once by the binding when its response is finished. */
export interface Answered extends Omit<Answer, 'listener'> {
  /** The span `enter` (or `span`) started for the request: ended here. */
  readonly span?: RequestSpan | undefined
}

export interface Edge {
  readonly gate: Gate
  /** The gate's request of an input (for a binding that checks without `enter`). */
  gateRequestOf(input: EdgeInput, requestId: string): GateRequest
  /** Whether a request target is under the gated prefix. */
  inScope(target: string, routeGated?: boolean): boolean
  enter(input: EdgeInput): MaybePromise<Entry>
  /** The refusal of an allowed form request whose body also carries `access_token`. */
  formRefusal(request: GateRequest, principal: Principal, body: string): Refused | undefined
  /** A later refusal of an allowed request (a route's own check), recorded like the gate's. */
  refuse(request: GateRequest, failure: AuthFailure, principal: Principal | null): Refused
  /**
   * Starts the span of a request this edge's listener answers without `enter` (the decision
   * listeners); undefined when tracing is off. Given its connection, the span ends as aborted
   * when that closes before the answer.
   */
  span(
    method: string,
    rawHeaders: readonly string[],
    connection?: RequestConnection,
  ): RequestSpan | undefined
  /** Records an answer (metrics, request log) and ends its span. */
  answered(answer: Answered): void
  /**
   * Whether `answered` does anything (records answers, or ends spans): a binding may skip
   * timing its responses otherwise.
   */
  readonly recordsAnswers: boolean
}

/** Builds the edge of one binding over a gate (or a bare authenticator's gate). */
export function createEdge(source: GateSource, options: EdgeOptions = {}): Edge {
  const gate = gateFrom(source)
  const { prefix } = options
  const exact = prefix?.endsWith('/') ? prefix.slice(0, -1) : prefix
  const answerPreflight = options.preflight !== 'pass'
  const listener = options.listener ?? 'api'
  const { recordAnswer, tracing } = gate
  const spanName: RequestSpanName =
    listener === 'decision' ? 'tokengate.decision' : 'tokengate.request'

  const inScope = (target: string, routeGated?: boolean): boolean => {
    if (prefix === undefined || routeGated === true) return true
    const path = pathOf(target)
    return path.startsWith(prefix) || path === exact
  }

  return {
    gate,
    gateRequestOf,
    inScope,
    enter(input) {
      if (!inScope(input.target, input.routeGated)) return OUTSIDE
      const { rawHeaders } = input
      const headers = readEdgeHeaders(rawHeaders)
      const requestId = input.requestId ?? requestIdFor(headers.requestId)
      if (input.method === 'OPTIONS' && isPreflightOf('OPTIONS', (n) => headerOf(rawHeaders, n))) {
        const answer = answerPreflight ? PREFLIGHT_ANSWER : undefined
        return { type: 'preflight', requestId, answer }
      }
      const request: GateRequest = {
        method: input.method,
        target: input.target,
        authorization: headers.authorization,
        tenantIds: headers.tenantIds,
        clientAddress: input.clientAddress,
        headers: rawHeaders,
        peerCertificate: peerCertificateOf(input.socket),
        requestId,
        access: input.access,
      }
      // No tracer: no span, and no closure around the check.
      if (tracing === undefined) {
        const outcome = gate.check(request)
        return isPromiseLike(outcome)
          ? Promise.resolve(outcome).then((settled) =>
              checked(request, settled, undefined, headers),
            )
          : checked(request, outcome, undefined, headers)
      }
      const span = tracing.start(spanName, { method: input.method, rawHeaders, route: input.route })
      // Ended by `answered`, or aborted when the client goes away first (no answer to end it).
      return checkTraced(gate, request, endedOnClose(span, input.socket), headers)
    },
    // RFC 6750 §2: the token in the header and in a form field is refused like the query's.
    formRefusal(request, principal, body) {
      return formHasAccessToken(body)
        ? gate.refuse(request, ONE_METHOD_FAILURE, principal)
        : undefined
    },
    refuse: (request, failure, principal) => gate.refuse(request, failure, principal),
    recordsAnswers: recordAnswer !== undefined || tracing !== undefined,
    span: (method, rawHeaders, connection) =>
      tracing && endedOnClose(tracing.start(spanName, { method, rawHeaders }), connection),
    answered(answer) {
      answer.span?.end(answer.status)
      if (recordAnswer === undefined) return
      // One literal of the Answer's shape (a spread copied every field through a slow path).
      const { method, target, requestId, status, durationMs, outcome } = answer
      recordAnswer({ listener, method, target, requestId, status, durationMs, outcome })
    },
  }
}

/** A Node response (`ServerResponse`, or HTTP/2's): the status that went out, and its 'finish'. */
export interface FinishingResponse {
  readonly statusCode: number
  once(event: 'finish', listener: () => void): unknown
}

/**
 * Records a checked request's answer once `response` has been sent in full, with the status
 * that went out. A client that goes away first was answered nothing, so nothing is recorded
 * (its span is aborted by `endedOnClose`): the rule of every front end on a Node server
 * (Fastify's `onResponse` runs on 'finish' too). `outcome` is read then: a form refusal
 * replaces the gate's.
 */
export function answeredOnFinish(
  edge: Edge,
  response: FinishingResponse,
  checked: {
    readonly request: GateRequest
    readonly span: RequestSpan | undefined
    /** When the request came in (`performance.now()`, before the check). */
    readonly started: number
  },
  outcome: () => Outcome,
): void {
  if (!edge.recordsAnswers) return
  const { request, span, started } = checked
  response.once('finish', () => {
    const { method, target, requestId } = request
    const durationMs = performance.now() - started
    const status = response.statusCode
    edge.answered({ method, target, requestId, status, durationMs, outcome: outcome(), span })
  })
}

/**
 * A refusal a listener decided before the gate, with its own problem (the decision listener's
 * path outside the API, unknown method, steering header): audited through the gate's
 * recorder (`auth.refused`), so no answer of a listener skips the audit.
 */
export function recordPreGateRefusal(
  gate: Pick<Gate, 'recordRefusal'>,
  asked: Pick<GateRequest, 'method' | 'target' | 'clientAddress' | 'requestId'>,
  response: FailureResponse,
): void {
  gate.recordRefusal?.({ ...asked, authorization: [], tenantIds: [] }, response, null)
}

const OUTSIDE: Entry = Object.freeze({ type: 'outside' })

function checked(
  request: GateRequest,
  outcome: Outcome,
  span: RequestSpan | undefined,
  headers: EdgeHeaders,
): Entry {
  const readsForm = outcome.allowed && isFormContentType(headers.contentType)
  return { type: 'checked', requestId: request.requestId, request, outcome, readsForm, span }
}

/** The check in the request's span (tracing on), apart so the untraced `enter` stays small. */
function checkTraced(
  gate: Gate,
  request: GateRequest,
  span: RequestSpan,
  headers: EdgeHeaders,
): MaybePromise<Entry> {
  // A check that throws (an app's own authenticator) is the binding's 500: its span ends.
  const failed = (error: unknown): never => {
    span.end(500)
    throw error
  }
  let outcome: MaybePromise<Outcome>
  try {
    outcome = span.run(() => gate.check(request))
  } catch (error) {
    return failed(error)
  }
  return isPromiseLike(outcome)
    ? Promise.resolve(outcome).then((settled) => checked(request, settled, span, headers), failed)
    : checked(request, outcome, span, headers)
}

/** The first value of a header in `rawHeaders`, any spelling of its name. */
function headerOf(rawHeaders: readonly string[], name: string): string | undefined {
  return headerValues(rawHeaders, name)[0]
}

/** rawHeaders: two `Authorization` or `X-Tenant-Id` lines are seen as two, and refused. */
function gateRequestOf(input: EdgeInput, requestId: string): GateRequest {
  const { authorization, tenantIds } = readAuthHeaders(input.rawHeaders)
  return {
    method: input.method,
    target: input.target,
    authorization,
    tenantIds,
    clientAddress: input.clientAddress,
    headers: input.rawHeaders,
    peerCertificate: peerCertificateOf(input.socket),
    requestId,
    access: input.access,
  }
}
