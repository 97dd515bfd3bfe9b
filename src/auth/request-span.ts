/**
 * The span of one request, as the edge (edge.ts) starts and ends it for every front end;
 * types only, so that neither the edge nor the gate loads OpenTelemetry (tracing.ts
 * implements them when `tracing.enabled`).
 */

/** The spans of requests (tracing.ts). */
export interface RequestTracing {
  /**
   * Starts the span `name` of one request continuing its `traceparent`; `route` is the
   * matched route's pattern (never the path itself), when the framework has one.
   */
  start(
    name: RequestSpanName,
    request: { readonly method: string; readonly rawHeaders: readonly string[]; route?: string },
  ): RequestSpan
}

export type RequestSpanName = 'tokengate.request' | 'tokengate.decision'

export interface RequestSpan {
  /** Runs `work` with the span active: spans started in it (and its continuations) are children. */
  run<T>(work: () => T): T
  /** Ends the span with the answer's status. */
  end(status: number): void
}
