/**
 * The span of one request, as the edge (edge.ts) starts and ends it for every front end
 * (the interface; tracing.ts implements it when `tracing.enabled`, so neither the edge nor
 * the gate loads OpenTelemetry), and `endedOnClose`, which ends it when the client goes away.
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

/** Ended once: by `end` or `abort`, whichever comes first; later calls do nothing. */
export interface RequestSpan {
  /** Runs `work` with the span active: spans started in it (and its continuations) are children. */
  run<T>(work: () => T): T
  /** Ends the span with the answer's status. */
  end(status: number): void
  /** Ends the span of a request whose client went away before its answer was done. */
  abort(): void
}

/** The connection a request came on (a `net.Socket`; a TLS or HTTP/2 one too). */
export interface RequestConnection {
  readonly destroyed?: boolean
  once?(event: 'close', listener: () => void): unknown
}

/** The spans still open on each connection, aborted together if it closes first. */
const openOn = new WeakMap<object, Set<RequestSpan>>()

/**
 * `span`, aborted if `connection` closes before it is ended: a client that goes away while
 * the gate checks, while its body is read or mid-answer (no 'finish', and a framework's
 * answer hook never runs) leaves no span open. One 'close' listener per connection however
 * many of its requests are open (HTTP/1.1 pipelining, HTTP/2 streams). Without a connection
 * (a Fetch runtime) the span is as given.
 */
export function endedOnClose(
  span: RequestSpan,
  connection: RequestConnection | undefined,
): RequestSpan {
  if (connection?.once === undefined) return span
  if (connection.destroyed === true) {
    span.abort()
    return span
  }
  let open = openOn.get(connection)
  if (open === undefined) {
    const spans = new Set<RequestSpan>()
    openOn.set(connection, spans)
    connection.once('close', () => {
      openOn.delete(connection)
      for (const each of spans) each.abort()
    })
    open = spans
  }
  const spans = open
  let ended = false
  const watched: RequestSpan = {
    run: (work) => span.run(work),
    end(status) {
      if (ended) return
      ended = true
      spans.delete(watched)
      span.end(status)
    },
    abort() {
      if (ended) return
      ended = true
      spans.delete(watched)
      span.abort()
    },
  }
  spans.add(watched)
  return watched
}
