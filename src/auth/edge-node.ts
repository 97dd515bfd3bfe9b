/**
 * The edge (edge.ts) applied to a Node request and response: what the Express and `node:http`
 * bindings share, so each only names its framework's request fields and its `next`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { peekBody } from '../http/form-body.ts'
import { sendFailureResponse } from '../http/node-response.ts'
import { problemResponse } from '../http/problem-response.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'
import { answeredOnFinish, type Edge, type Entry } from './edge.ts'
import type { Access, Allowed, GateRequest, Outcome } from './gate.ts'

/** An allowed request: its principal and the request the gate checked. */
export type Passed = { readonly request: GateRequest; readonly outcome: Allowed }

/** The largest form body read for the form-body check (1 MiB, Fastify's default limit); 413 beyond. */
export const FORM_BODY_LIMIT = 1_048_576

/**
 * Runs the edge for `req` (as received at `target`, from `clientAddress`) and applies its
 * entry on `res`: a preflight or a refusal is
 * answered here; an allowed request goes to `allowed`, one outside the prefix (or a handed-on
 * preflight) to `pass`; a failure reading the body to `failed`.
 */
export function enterNode(
  edge: Edge,
  node: {
    req: IncomingMessage
    res: ServerResponse
    target: string
    clientAddress: string
    access?: Access | undefined
  },
  then: {
    pass(): void
    allowed(passed: Passed): void
    failed(error: unknown): void
  },
): void {
  const { req, res } = node
  const started = performance.now()
  const apply = (entry: Entry) => {
    if (entry.type === 'outside') return then.pass()
    if (entry.type === 'preflight') {
      if (entry.answer === undefined) return then.pass()
      res.writeHead(entry.answer.status, {
        ...entry.answer.headers,
        'x-request-id': entry.requestId,
      })
      return void res.end()
    }
    const { requestId, request, span } = entry
    let outcome: Outcome = entry.outcome
    res.setHeader('x-request-id', requestId)
    answeredOnFinish(edge, res, { request, span, started }, () => outcome)
    if (!outcome.allowed) return sendFailureResponse(res, outcome, requestId)
    const allowed = outcome
    for (const [name, value] of Object.entries(allowed.headers)) res.setHeader(name, value)
    // The app's own work in the request's span (tracing on), so its spans are children.
    const handOn = () => then.allowed({ request, outcome: allowed })
    if (!entry.readsForm) return span ? span.run(handOn) : handOn()
    peekBody(req, FORM_BODY_LIMIT, contentLengthOf(req)).then((body) => {
      // Fail closed: a form body too large to check is refused, never handed on unchecked.
      if (body === undefined) return sendFailureResponse(res, tooLarge(requestId), requestId)
      const refused = edge.formRefusal(request, allowed.principal, body.toString('latin1'))
      if (refused === undefined) return span ? span.run(handOn) : handOn()
      outcome = refused
      sendFailureResponse(res, refused, requestId)
    }, then.failed)
  }
  const { method = 'GET', rawHeaders, socket } = req
  const entered = edge.enter({ ...node, method, rawHeaders, socket })
  if (isPromiseLike(entered)) Promise.resolve(entered).then(apply, then.failed)
  else apply(entered)
}

function tooLarge(requestId: string) {
  const detail = 'The request body is larger than this server accepts.'
  return problemResponse('payload_too_large', detail, requestId)
}

function contentLengthOf(req: IncomingMessage): number | undefined {
  const value = req.headers['content-length']
  return value === undefined ? undefined : Number(value)
}
