/**
 * OpenTelemetry spans (`tracing.enabled`), through `@opentelemetry/api` only: the operator
 * registers an SDK and an exporter (docs/tracing.md); without one every span is a no-op.
 * main.ts loads this module only when tracing is on and wraps what it traces once, at
 * composition: with tracing off nothing here is loaded, and no request pays for a wrapper.
 *
 * | span | kind | parent | attributes |
 * | --- | --- | --- | --- |
 * | `tokengate.request` | server | the incoming `traceparent` | method, route pattern (Fastify), status |
 * | `tokengate.decision` | server | the incoming `traceparent` | method, status |
 * | `tokengate.authenticate` | internal | request or decision | token type, outcome code, fingerprint |
 * | `tokengate.store.lookup` | client | authenticate (cache misses only) | what was looked up, found |
 * | `tokengate.jwks.fetch` | client | authenticate, or none (a background refresh) | URL without query, status |
 * | `tokengate.upstream` | client | request | method, upstream host, status |
 *
 * The request spans are started and ended by the edge (auth/edge.ts) for every front end:
 * `tokengate.request` for each request the gate checks (the server, the gateway, the library
 * bindings; a preflight or a route outside the gated prefix has none), `tokengate.decision`
 * for each decision of the HTTP or gRPC decision listener.
 * The incoming context is read from the request's `traceparent` (the registered propagator,
 * W3C Trace Context by default). When an instrumentation (the SDK's HTTP one) already made a
 * span active for the request, that span is the parent and no `tokengate.request` is made.
 * The upstream request gets the upstream span's `traceparent` in place of the caller's.
 *
 * Why spans carry so little: a span leaves the process for whatever backend the operator
 * chose, so it holds no token, hash, secret, claim or tenant name, only what a log line may
 * hold: the token's fingerprint (`pat_…last4`, a JWT's `iss`/`kid`/`sub`) and outcome codes.
 */
import {
  type Attributes,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api'
import type { Dispatcher } from 'undici'
import type { AuthenticateMaybeSync } from '../core/authenticate.ts'
import { credentialKindNamed } from '../core/credential-kinds.ts'
import { hmacFingerprint } from '../core/fingerprint.ts'
import type { AuthLookups } from '../core/ports.ts'
import type { AuthResult } from '../core/principal.ts'
import { headerValues, type TokenDigest } from '../core/raw-headers.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'
import type { RequestSpan, RequestTracing } from './request-span.ts'

export interface Tracing {
  /** The gate's authentication, in a `tokengate.authenticate` span. */
  authenticate(inner: AuthenticateMaybeSync): AuthenticateMaybeSync
  /** The store reads behind the lookup cache, each in a `tokengate.store.lookup` span. */
  lookups(inner: AuthLookups): AuthLookups
  /** `fetch` for JWKS and discovery documents, each in a `tokengate.jwks.fetch` span. */
  readonly fetch: typeof globalThis.fetch
  /** The spans of requests, started and ended by the edge (edge.ts) of every front end. */
  readonly request: RequestTracing
  /**
   * An undici interceptor for the pool to `origin`: each exchange in a span, its
   * `traceparent` injected.
   */
  upstream(origin: string): Dispatcher.DispatcherComposeInterceptor
}

/** @param storeSystem `postgresql` or `sqlite`, the lookup spans' `db.system.name`. */
export function createTracing(storeSystem: string): Tracing {
  const tracer = trace.getTracer('tokengate')

  /** A server span for one request, continuing its `traceparent` (or an active span). */
  const request: RequestTracing = {
    start(name, { method, rawHeaders, route }) {
      const active = context.active()
      const instrumented = trace.getSpan(active) !== undefined
      // An instrumentation's server span is already the request's: ours would repeat it.
      if (instrumented && name === 'tokengate.request') return UNTRACED
      const parent = instrumented ? active : propagation.extract(ROOT_CONTEXT, carrier(rawHeaders))
      const attributes: Attributes = { 'http.request.method': method }
      if (route !== undefined) attributes['http.route'] = route
      const span = tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent)
      const spanContext = trace.setSpan(parent, span)
      let ended = false
      return {
        run: (work) => context.with(spanContext, work),
        end(status) {
          if (ended) return
          ended = true
          span.setAttribute('http.response.status_code', status)
          if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
          span.end()
        },
        // The client went away before its answer was done: no status was answered to it.
        abort() {
          if (ended) return
          ended = true
          span.setStatus({ code: SpanStatusCode.ERROR })
          span.setAttribute('error.type', 'aborted')
          span.end()
        },
      }
    },
  }

  const authenticate =
    (inner: AuthenticateMaybeSync): AuthenticateMaybeSync =>
    (input, digest) => {
      const span = tracer.startSpan('tokengate.authenticate')
      const finish = (result: AuthResult) => {
        span.setAttribute('tokengate.token_type', tokenType(input, result))
        if (result.ok) {
          span.setAttributes({
            'tokengate.outcome': 'ok',
            'tokengate.fingerprint': result.principal.fingerprint,
          })
        } else {
          span.setAttribute('tokengate.outcome', result.failure.code)
          const fingerprint = refusedFingerprint(digest ?? input.tokenSha256, result)
          if (fingerprint) span.setAttribute('tokengate.fingerprint', fingerprint)
          if (result.failure.code === 'unavailable') span.setStatus({ code: SpanStatusCode.ERROR })
        }
        span.end()
        return result
      }
      let result: ReturnType<AuthenticateMaybeSync>
      try {
        result = context.with(
          trace.setSpan(context.active(), span),
          inner,
          undefined,
          input,
          digest,
        )
      } catch (error) {
        throw failed(span, error)
      }
      if (!isPromiseLike(result)) return finish(result)
      return result.then(finish, (error: unknown) => {
        throw failed(span, error)
      })
    }

  const lookup = <T>(what: 'pat' | 'tenant', read: () => T | Promise<T>) =>
    traced(
      tracer.startSpan('tokengate.store.lookup', {
        kind: SpanKind.CLIENT,
        attributes: { 'db.system.name': storeSystem, 'tokengate.lookup': what },
      }),
      read,
      (span, found) => span.setAttribute('tokengate.found', found !== undefined),
    )

  const tracedFetch: typeof globalThis.fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input))
    return traced(
      tracer.startSpan('tokengate.jwks.fetch', {
        kind: SpanKind.CLIENT,
        attributes: { 'http.request.method': 'GET', 'url.full': url.origin + url.pathname },
      }),
      () => globalThis.fetch(input, init),
      (span, response) => {
        span.setAttribute('http.response.status_code', response.status)
        if (!response.ok) span.setStatus({ code: SpanStatusCode.ERROR })
      },
    )
  }

  const upstream: Tracing['upstream'] = (origin) => (dispatch) => (options, handler) => {
    const span = tracer.startSpan('tokengate.upstream', {
      kind: SpanKind.CLIENT,
      attributes: { 'http.request.method': options.method, 'server.address': new URL(origin).host },
    })
    const headers = { ...(options.headers as Record<string, string | string[] | undefined>) }
    // The caller's trace headers are replaced by this span's: the upstream's parent is us.
    delete headers.traceparent
    delete headers.tracestate
    propagation.inject(trace.setSpan(context.active(), span), headers)
    return dispatch({ ...options, headers }, new UpstreamSpanHandler(handler, span))
  }

  return {
    authenticate,
    lookups: (inner) => ({
      findPatByHash: (tokenHash) => lookup('pat', () => inner.findPatByHash(tokenHash)),
      findTenant: (id) => lookup('tenant', () => inner.findTenant(id)),
    }),
    fetch: tracedFetch,
    request,
    upstream,
  }
}

/** The span of a request an instrumentation already traces: its work runs as it is. */
const UNTRACED: RequestSpan = Object.freeze({
  run: <T>(work: () => T): T => work(),
  end() {},
  abort() {},
})

/** The trace headers of a request's raw headers, as the propagator reads them. */
function carrier(rawHeaders: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = {}
  for (const name of ['traceparent', 'tracestate']) {
    const [value] = headerValues(rawHeaders, name)
    if (value !== undefined) headers[name] = value
  }
  return headers
}

/** Runs `work` in `span` (made active), noting the result with `done`, and ends the span. */
function traced<T>(
  span: Span,
  work: () => T | Promise<T>,
  done: (span: Span, result: T) => void,
): T | Promise<T> {
  const finish = (result: T) => {
    done(span, result)
    span.end()
    return result
  }
  let result: T | Promise<T>
  try {
    result = context.with(trace.setSpan(context.active(), span), work)
  } catch (error) {
    throw failed(span, error)
  }
  if (!isPromiseLike(result)) return finish(result)
  return Promise.resolve(result).then(finish, (error: unknown) => {
    throw failed(span, error)
  })
}

/** Ends `span` as failed, naming the error's class only (messages may hold addresses). */
function failed(span: Span, error: unknown): unknown {
  span.setStatus({ code: SpanStatusCode.ERROR })
  span.setAttribute('error.type', error instanceof Error ? error.name : 'unknown')
  span.end()
  return error
}

/** The kind that authenticated or claimed the request, else `none` or `malformed`. */
function tokenType(input: Parameters<AuthenticateMaybeSync>[0], result: AuthResult): string {
  if (result.ok) return result.principal.tokenType
  if (result.claimed) return result.claimed.kind
  return input.authorization.length === 0 ? 'none' : 'malformed'
}

/** A refused credential's fingerprint as its kind makes it; `hmac:` for an unclaimed one. */
function refusedFingerprint(
  digest: TokenDigest | undefined,
  result: AuthResult & { ok: false },
): string | undefined {
  const claimed = result.claimed
  if (claimed === undefined) {
    return digest ? hmacFingerprint(digest.token, digest.sha256Hex) : undefined
  }
  const sha256Hex = digest?.token === claimed.credential ? digest.sha256Hex : undefined
  const kind = credentialKindNamed(claimed.kind)
  return kind
    ? kind.fingerprint(claimed.credential, sha256Hex)
    : hmacFingerprint(claimed.credential, sha256Hex)
}

/** undici's handler of one upstream exchange, passed through; the span ends with it. */
class UpstreamSpanHandler implements Dispatcher.DispatchHandler {
  readonly #inner: Dispatcher.DispatchHandler
  readonly #span: Span

  constructor(inner: Dispatcher.DispatchHandler, span: Span) {
    this.#inner = inner
    this.#span = span
  }

  onRequestStart(controller: Dispatcher.DispatchController, context: unknown): void {
    this.#inner.onRequestStart?.(controller, context)
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
    statusMessage?: string,
  ): void {
    this.#span.setAttribute('http.response.status_code', statusCode)
    if (statusCode >= 500) this.#span.setStatus({ code: SpanStatusCode.ERROR })
    this.#inner.onResponseStart?.(controller, statusCode, headers, statusMessage)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#inner.onResponseData?.(controller, chunk)
  }

  onResponseEnd(
    controller: Dispatcher.DispatchController,
    trailers: Record<string, string | string[] | undefined>,
  ): void {
    this.#span.end()
    this.#inner.onResponseEnd?.(controller, trailers)
  }

  onResponseError(controller: Dispatcher.DispatchController, error: Error): void {
    failed(this.#span, error)
    this.#inner.onResponseError?.(controller, error)
  }
}
