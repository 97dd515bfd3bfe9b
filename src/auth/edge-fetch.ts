/**
 * The edge (edge.ts) answering with Fetch `Response`s: what the Hono binding (and any
 * Fetch-style framework) needs, so the binding only reads its context and calls `next`.
 */
import { failureHeaders } from '../http/node-response.ts'
import { answeredOnFinish, type Edge, type EdgeInput, type FinishingResponse } from './edge.ts'
import type { Passed } from './edge-node.ts'
import type { Outcome, Refused } from './gate.ts'

/** What the binding does: answer `response`, or hand on (`passed` set when checked). */
export type FetchEntry =
  | { readonly response: Response; readonly passed?: undefined }
  | {
      readonly response?: undefined
      /** The allowed request; undefined outside the prefix or for a handed-on preflight. */
      readonly passed: (Passed & { readonly requestId: string }) | undefined
      /** Runs the app's work in the request's span (tracing on), so its spans are children. */
      run<T>(work: () => T): T
      /**
       * Records the answer once the app has answered (or thrown: 500), and ends the span;
       * nothing on a Node server (`outgoing` given), where the edge records the answer once
       * the response is sent in full (`answeredOnFinish`), and none for a client gone first.
       */
      answered(status: number): void
    }

const runAsIs = <T>(work: () => T): T => work()
const answeredAsSent = () => {}
const HAND_ON: FetchEntry = Object.freeze({ passed: undefined, run: runAsIs, answered() {} })

/**
 * Runs the edge; `readText` reads the body the framework's way (cached for the app);
 * `outgoing`, the Node response when the Fetch app is served by a Node server
 * (`@hono/node-server`), which the answer is recorded on.
 */
export async function enterFetch(
  edge: Edge,
  input: EdgeInput,
  readText: () => Promise<string>,
  outgoing?: FinishingResponse,
): Promise<FetchEntry> {
  const started = performance.now()
  const entry = await edge.enter(input)
  if (entry.type === 'outside') return HAND_ON
  if (entry.type === 'preflight') {
    if (entry.answer === undefined) return HAND_ON
    const headers = { ...entry.answer.headers, 'x-request-id': entry.requestId }
    return { response: new Response(null, { status: entry.answer.status, headers }) }
  }
  const { requestId, request, span } = entry
  let outcome: Outcome = entry.outcome
  if (outgoing) answeredOnFinish(edge, outgoing, { request, span, started }, () => outcome)
  if (outcome.allowed && entry.readsForm) {
    let text: string
    try {
      text = await readText()
    } catch (error) {
      // The body never arrived (the client went away): nothing answers it, so nothing ends it.
      span?.abort()
      throw error
    }
    outcome = edge.formRefusal(request, outcome.principal, text) ?? outcome
  }
  const answered = outgoing
    ? answeredAsSent
    : (status: number) => {
        const { method, target } = request
        const durationMs = performance.now() - started
        edge.answered({ method, target, requestId, status, durationMs, outcome, span })
      }
  if (!outcome.allowed) {
    answered(outcome.status)
    return { response: refusedResponse(outcome) }
  }
  const run = span ? <T>(work: () => T): T => span.run(work) : runAsIs
  return { passed: { request, outcome, requestId }, run, answered }
}

/** A refusal as a Fetch `Response`, exactly as the server answers it. */
export function refusedResponse(refused: Refused): Response {
  const headers = failureHeaders(refused, refused.body.requestId)
  return new Response(JSON.stringify(refused.body), { status: refused.status, headers })
}
