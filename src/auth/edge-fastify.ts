/**
 * The edge (edge.ts) as Fastify hooks, for the two front ends on Fastify: tokengate's own
 * server and the public `tokengate/fastify` plugin register the same hooks, so neither
 * imports the other. Types only from Fastify. Every request under the prefix goes through
 * the edge in `onRequest` (routing has already matched it, so the route's
 * `config.permissions` are known): an unknown path there is 401 without a valid token and
 * 404 with one, so anonymous callers learn nothing about the routes.
 */
import { Readable } from 'node:stream'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { AuthFailure } from '../core/failure.ts'
import type { Principal } from '../core/principal.ts'
import { readBounded } from '../http/form-body.ts'
import { type FailureResponse, sendProblemResponse } from '../http/problem-response.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'
import type { Edge, Entry, RequestSpan } from './edge.ts'
import type { Access, GateRequest, Outcome, Refused } from './gate.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated caller; null outside the protected prefix. */
    principal: Principal | null
    /** The refusal's failure, when one was answered. */
    authFailure: AuthFailure | null
    /** The gate's outcome for this request; null outside the protected prefix. */
    outcome: Outcome | null
  }
  interface FastifyContextConfig {
    /** Permissions the route requires; all must be held (403 otherwise). */
    permissions?: readonly string[]
    /** What the route requires, when it is not a list of permissions (the gateway's policy). */
    access?: Access
  }
}

export interface EdgeHookOptions {
  /** The gated prefix (also matched against the route's pattern). */
  readonly prefix: string
  /** Whether Fastify's `genReqId` decides ids already (the server's calls `requestIdFor`). */
  readonly idsDecided: boolean
}

/** Allowed requests whose body is a form, to be read for a second token (RFC 6750 §2). */
const formBodies = new WeakSet<FastifyRequest>()

/** Each checked request's span (tracing on), ended when its answer is recorded. */
const spans = new WeakMap<FastifyRequest, RequestSpan>()

/** The instance decoration holding the edge, for the form check and handlers' refusals. */
const EDGE = Symbol('tokengate.edge')

declare module 'fastify' {
  interface FastifyInstance {
    [EDGE]?: Edge
  }
}

/** Registers the edge's hooks on `fastify` (the root context: they see every route). */
export function registerEdgeHooks(
  fastify: FastifyInstance,
  edge: Edge,
  options: EdgeHookOptions,
): void {
  const { prefix, idsDecided } = options
  const accessOf = routeAccess()
  fastify.decorateRequest('principal', null)
  fastify.decorateRequest('authFailure', null)
  fastify.decorateRequest('outcome', null)

  // One read of `routeOptions` (a getter that builds a 12-field object per call), one input
  // object, and no closure per request unless the check waits (issue #36).
  fastify.addHook('onRequest', (request, reply, done) => {
    const { raw } = request
    const route = request.routeOptions
    const url = route.url
    const entered = edge.enter({
      method: request.method,
      target: request.url,
      rawHeaders: raw.rawHeaders,
      clientAddress: request.ip,
      socket: raw.socket,
      requestId: idsDecided ? String(request.id) : undefined,
      routeGated: url === undefined ? false : url.startsWith(prefix),
      route: url,
      access: accessOf(route.config),
    })
    if (!isPromiseLike(entered)) return applyEntry(request, reply, done, entered, idsDecided)
    applyLater(entered, request, reply, done, idsDecided)
  })

  // RFC 6750 §2: the form body is read (within the body limit) only for allowed form
  // requests, then handed on unchanged as a stream, so the gateway still proxies it as is.
  const bodyLimit = fastify.initialConfig.bodyLimit ?? 1_048_576
  fastify.addHook('preParsing', (request, reply, payload, done) => {
    // The edge found the form content type already: `request.headers` is not touched (Node
    // builds that object from the raw headers on first read).
    if (!formBodies.has(request)) return done(null, payload)
    readForm(edge, bodyLimit, request, reply, payload, done)
  })

  fastify.decorate(EDGE, edge)
  if (edge.recordsAnswers) {
    fastify.addHook('onResponse', (request, reply, done) => {
      if (request.outcome !== null || request.url.startsWith(prefix)) {
        edge.answered({
          method: request.method,
          target: request.url,
          requestId: String(request.id),
          status: reply.statusCode,
          durationMs: reply.elapsedTime,
          outcome: request.outcome ?? undefined,
          span: spans.get(request),
        })
      }
      done()
    })
  }
}

// The continuations below are functions of their own, not closures in the hooks: a closure
// there makes V8 allocate a context for the hook's arguments on every request, waiting,
// reading a form or not.

function applyLater(
  entered: PromiseLike<Entry>,
  request: FastifyRequest,
  reply: FastifyReply,
  done: (error?: Error) => void,
  idsDecided: boolean,
): void {
  Promise.resolve(entered).then(
    (settled) => applyEntry(request, reply, done, settled, idsDecided),
    done,
  )
}

/** An allowed form request's body: refused when it carries the token too, else handed on. */
function readForm(
  edge: Edge,
  bodyLimit: number,
  request: FastifyRequest,
  reply: FastifyReply,
  payload: Readable,
  done: (error: Error | null, payload?: Readable) => void,
): void {
  const principal = request.principal as Principal
  readBounded(payload, bodyLimit).then((body) => {
    if (body === undefined) return done(bodyTooLarge())
    const text = body.toString('latin1')
    const refused = edge.formRefusal(gateRequestOf(edge, request), principal, text)
    if (!refused) return done(null, Readable.from([body]))
    sendRefused(request, reply, refused)
  }, done)
}

/** Applies the edge's entry to a Fastify request: hand it on, or answer it. */
function applyEntry(
  request: FastifyRequest,
  reply: FastifyReply,
  done: (error?: Error) => void,
  entry: Entry,
  idsDecided: boolean,
): void {
  if (entry.type === 'outside') {
    done()
    return
  }
  if (!idsDecided) request.id = entry.requestId
  reply.header('x-request-id', entry.requestId)
  if (entry.type === 'preflight') {
    if (entry.answer === undefined) {
      done()
      return
    }
    return void reply.code(entry.answer.status).headers(entry.answer.headers).send()
  }
  const { outcome, span } = entry
  request.outcome = outcome
  if (span) spans.set(request, span)
  if (!outcome.allowed) return void sendRefused(request, reply, outcome)
  request.principal = outcome.principal
  if (entry.readsForm) formBodies.add(request)
  // The RateLimit pair, when the limiter counted the request (none from a bare gate): set
  // one by one (`reply.headers` takes an `Object.keys` array per call first).
  const { headers } = outcome
  for (const name in headers) reply.header(name, headers[name] as string)
  // The rest of the request (its handler, the gateway's upstream exchange) in its span.
  span ? span.run(done) : done()
}

/** Answers a refusal (the gate's, or one a handler got from `refuse` / `authorize`). */
export function sendRefused(
  request: FastifyRequest,
  reply: FastifyReply,
  refused: Refused,
): FastifyReply {
  request.outcome = refused
  request.authFailure = refused.failure
  return sendProblemResponse(reply, refused)
}

/**
 * A later refusal from a route handler (a permission that depends on the request's
 * parameters), recorded through the gate like its own.
 */
export function refuse(
  request: FastifyRequest,
  reply: FastifyReply,
  failure: AuthFailure,
): FastifyReply {
  const edge = edgeOf(request)
  const refused = edge.refuse(gateRequestOf(edge, request), failure, request.principal)
  return sendRefused(request, reply, refused)
}

/**
 * A refusal with its own problem after the gate allowed the request (the gateway's in-flight
 * caps): audited through the gate's recorder (`auth.refused`), then answered.
 */
export function sendRecordedProblem(
  request: FastifyRequest,
  reply: FastifyReply,
  response: FailureResponse,
): FastifyReply {
  const edge = edgeOf(request)
  edge.gate.recordRefusal?.(gateRequestOf(edge, request), response, request.principal)
  return sendProblemResponse(reply, response)
}

function edgeOf(request: FastifyRequest): Edge {
  const edge = request.server[EDGE]
  if (!edge) throw new Error('tokengate: the edge hooks are not registered on this server')
  return edge
}

function inputOf(request: FastifyRequest) {
  const { raw } = request
  const { rawHeaders, socket } = raw
  return {
    method: request.method,
    target: request.url,
    rawHeaders,
    clientAddress: request.ip,
    socket,
  }
}

/** The gate's request of a checked request, rebuilt for a later refusal (rare). */
function gateRequestOf(edge: Edge, request: FastifyRequest): GateRequest {
  return edge.gateRequestOf(inputOf(request), String(request.id))
}

/** The route's access, built once per route config: its policy, or its permissions. */
function routeAccess(): (config: FastifyRequest['routeOptions']['config']) => Access | undefined {
  const built = new WeakMap<object, Access | undefined>()
  return (config) => {
    const known = built.get(config)
    if (known !== undefined || built.has(config)) return known
    const access =
      config.access ??
      (config.permissions?.length ? { permissions: config.permissions } : undefined)
    built.set(config, access)
    return access
  }
}

function bodyTooLarge(): Error {
  return Object.assign(new Error('Request body is too large'), {
    code: 'FST_ERR_CTP_BODY_TOO_LARGE',
    statusCode: 413,
  })
}
