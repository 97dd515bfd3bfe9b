/**
 * The edge (edge.ts) answering with Fetch `Response`s: what the Hono binding (and any
 * Fetch-style framework) needs, so the binding only reads its context and calls `next`.
 */
import { failureHeaders } from '../http/node-response.ts'
import type { Edge, EdgeInput } from './edge.ts'
import type { Passed } from './edge-node.ts'
import type { Outcome, Refused } from './gate.ts'

/** What the binding does: answer `response`, or hand on (`passed` set when checked). */
export type FetchEntry =
  | { readonly response: Response; readonly passed?: undefined }
  | {
      readonly response?: undefined
      /** The allowed request; undefined outside the prefix or for a handed-on preflight. */
      readonly passed: (Passed & { readonly requestId: string }) | undefined
      /** Records the answer once the app has answered. */
      answered(status: number): void
    }

const HAND_ON: FetchEntry = Object.freeze({ passed: undefined, answered() {} })

/** Runs the edge; `readText` reads the body the framework's way (cached for the app). */
export async function enterFetch(
  edge: Edge,
  input: EdgeInput,
  readText: () => Promise<string>,
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
  if (outcome.allowed && entry.readsForm) {
    outcome = edge.formRefusal(request, outcome.principal, await readText()) ?? outcome
  }
  const answered = (status: number) => {
    const { method, target } = request
    const durationMs = performance.now() - started
    edge.answered({ method, target, requestId, status, durationMs, outcome, span })
  }
  if (!outcome.allowed) {
    answered(outcome.status)
    return { response: refusedResponse(outcome) }
  }
  return { passed: { request, outcome, requestId }, answered }
}

/** A refusal as a Fetch `Response`, exactly as the server answers it. */
export function refusedResponse(refused: Refused): Response {
  const headers = failureHeaders(refused, refused.body.requestId)
  return new Response(JSON.stringify(refused.body), { status: refused.status, headers })
}
