/**
 * Envoy's gRPC ext_authz service, `envoy.service.auth.v3.Authorization/Check`, on the one
 * gate: a `CheckRequest` becomes an `AskedRequest` (decide.ts), the `Answer` a
 * `CheckResponse`. The same decisions and problem bodies as the HTTP decision listener:
 * a refusal is a `denied_response` (its status, headers and problem+json body reach the
 * client as they are), an allowed request an `ok_response` whose headers replace the
 * upstream request's identity headers, whose `headers_to_remove` drop every other spelling a
 * client sent, and whose `response_headers_to_add` carry the RateLimit pair.
 *
 * Protos: Envoy's own, vendored in vendor/envoy-protos/ and loaded once at start with
 * @grpc/proto-loader (grpc-js's own dependency): no code generation step and no generated
 * code to review, as the repository runs its sources directly.
 *
 * Only peers in `decision.trustedProxies` of kind envoy are answered: a CheckRequest states
 * the whole request, so anyone else could have any request decided. Checked when the TCP
 * connection is accepted, before any HTTP/2 work (our own net.Server hands trusted sockets
 * to grpc-js through its connection injector): checked per message, an untrusted address
 * held 30,000 half-sent streams over 6 connections (+262 MB). A trusted peer gets at most
 * MAX_STREAMS_PER_CONNECTION concurrent streams, and its connections count against the
 * process's connection caps like every listener's.
 */
import { type AddressInfo, createServer, type Socket } from 'node:net'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { type Edge, recordPreGateRefusal, requestIdFor } from '../auth/edge.ts'
import type { Outcome } from '../auth/gate.ts'
import type { OutcomeRecorder } from '../auth/outcome-recorder.ts'
import type { RequestConnection } from '../auth/request-span.ts'
import { failureHeaders } from '../http/node-response.ts'
import type { ConnectionBudget } from '../lib/connection-budget.ts'
import { isPromiseLike } from '../lib/maybe-async.ts'
import type { Answer, Decider } from './decide.ts'
import type { Diagnostics } from './diagnostics.ts'
import { clientAddressOf } from './forwarded-request.ts'
import { cannotListen } from './listen-error.ts'
import type { ProxyMatcher } from './proxy-kinds.ts'

export const PROTO_DIR = fileURLToPath(new URL('../../vendor/envoy-protos/', import.meta.url))
export const CHECK_PROTO = 'envoy/service/auth/v3/external_auth.proto'
/** As Envoy's docs spell messages: field names as in the .proto, enums by name. */
export const PROTO_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [PROTO_DIR],
}

export interface EnvoyGrpcOptions {
  readonly host: string
  readonly port: number
  readonly decide: Decider
  readonly trusted: ProxyMatcher
  /** Audits refusals decided before the gate. */
  readonly recorder: Pick<OutcomeRecorder, 'recordRefusal'>
  /** The decision listener's edge: records each answer and traces each decision. */
  readonly edge: Pick<Edge, 'span' | 'answered' | 'recordsAnswers'>
  readonly logger: { error(fields: object, message: string): void }
  /** Where a refused peer is reported (one line per episode). */
  readonly diagnostics: Diagnostics
  /** The process's connection caps, shared with the other listeners. */
  readonly connections?: ConnectionBudget | undefined
}

/**
 * Concurrent streams per HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS): Envoy's own
 * default per upstream connection is 2^31 - 1 and it opens more connections as needed, so a
 * bound here costs a busy Envoy a few more connections, never a refused check.
 */
export const MAX_STREAMS_PER_CONNECTION = 100
/** Memory one HTTP/2 session may buffer (MB): beyond it new streams are refused. */
const MAX_SESSION_MEMORY_MB = 10

export interface EnvoyGrpc {
  /** `http://host:port` (plaintext HTTP/2). */
  readonly url: string
  close(): Promise<void>
}

/** The parts of a CheckRequest tokengate reads (attribute_context.proto). */
interface CheckRequest {
  attributes?: {
    source?: { address?: { socket_address?: { address?: string } }; certificate?: string }
    request?: {
      http?: {
        method?: string
        path?: string
        host?: string
        scheme?: string
        headers?: Record<string, string>
        header_map?: { headers?: { key?: string; value?: string; raw_value?: Buffer }[] }
      }
    }
  }
}

interface HeaderValueOption {
  header: { key: string; value: string }
  append_action: 'OVERWRITE_IF_EXISTS_OR_ADD'
}

/** Starts the service on `host:port` (0: any free port). */
export async function startEnvoyGrpc(options: EnvoyGrpcOptions): Promise<EnvoyGrpc> {
  const definition = protoLoader.loadSync(CHECK_PROTO, PROTO_OPTIONS)
  const service =
    (definition['envoy.service.auth.v3.Authorization'] as grpc.ServiceDefinition) ?? {}
  const server = new grpc.Server({
    'grpc.max_concurrent_streams': MAX_STREAMS_PER_CONNECTION,
    'grpc-node.max_session_memory': MAX_SESSION_MEMORY_MB,
  })
  server.addService(service, {
    Check: (
      call: grpc.ServerUnaryCall<CheckRequest, unknown>,
      callback: grpc.sendUnaryData<unknown>,
    ) => check(options, call, callback),
  })
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure())
  const { connections } = options
  const listener = createServer((socket: Socket) => {
    if (options.trusted(socket.remoteAddress) !== 'envoy') {
      socket.destroy()
      return options.diagnostics.warn(
        'grpc_untrusted_peer',
        { listener: 'decision-grpc', peer: socket.remoteAddress },
        'decision gRPC: a connection from an address that is not a trusted Envoy was closed; if it is your Envoy, add its address to decision.trustedProxies (with decision.proxy: envoy, or ADDRESS=envoy)',
      )
    }
    if (connections && !connections.admit(socket)) return
    injector.injectConnection(socket)
  })
  await new Promise<void>((resolve, reject) => {
    listener.once('error', (error) => {
      const name = 'decision gRPC listener (decision.host, decision.grpcPort)'
      reject(cannotListen(name, options.host, options.port, error))
    })
    listener.listen(options.port, options.host, () => {
      listener.removeAllListeners('error')
      // An accept that fails later (EMFILE) is logged; it must not end the process.
      listener.on('error', (error) =>
        options.logger.error({ err: error }, 'decision gRPC: accept failed'),
      )
      resolve()
    })
  })
  const host = options.host.includes(':') ? `[${options.host}]` : options.host
  return {
    url: `http://${host}:${(listener.address() as AddressInfo).port}`,
    close: async () => {
      // Stops accepting at once; resolves once the sessions below have closed their sockets.
      const stopped = new Promise<void>((resolve) => listener.close(() => resolve()))
      await new Promise<void>((resolve) => {
        const force = setTimeout(() => server.forceShutdown(), 5_000)
        server.tryShutdown(() => {
          clearTimeout(force)
          resolve()
        })
      })
      await stopped
    },
  }
}

function check(
  options: EnvoyGrpcOptions,
  call: grpc.ServerUnaryCall<CheckRequest, unknown>,
  callback: grpc.sendUnaryData<unknown>,
): void {
  const started = performance.now()
  const peer = peerAddress(call.getPeer())
  if (options.trusted(peer) !== 'envoy') {
    callback({
      code: grpc.status.PERMISSION_DENIED,
      details: 'not a trusted Envoy (decision.trustedProxies)',
    })
    return
  }
  const http = call.request.attributes?.request?.http ?? {}
  const rawHeaders = rawHeadersOf(http)
  const requestId = requestIdFor(headerOf(rawHeaders, 'x-request-id'))
  const source = call.request.attributes?.source?.address?.socket_address?.address || peer
  const clientAddress = clientAddressOf(
    {
      socket: { remoteAddress: source },
      headers: { 'x-forwarded-for': headerOf(rawHeaders, 'x-forwarded-for') },
    },
    options.trusted,
  )
  const method = http.method ?? ''
  const span = options.edge.span(method, rawHeaders, cancelledWith(call))
  const asked = () =>
    options.decide({
      kind: 'envoy',
      requestLine: { method, url: http.path ?? '' },
      rawHeaders,
      pathPrefix: '',
      clientAddress,
      requestId,
      host: http.host,
      sourceCertificate: call.request.attributes?.source?.certificate || undefined,
    })
  const decided = span ? span.run(asked) : asked()
  const respond = (answer: Answer) => {
    const { status, response } = checkResponse(answer, requestId)
    callback(null, response)
    if (answer.type === 'refuse' && answer.outcome === undefined) {
      const { method, target } = decided
      const asked = { method, target, clientAddress, requestId }
      recordPreGateRefusal(options.recorder, asked, answer.response)
    }
    // Cancelled first (its span aborted): no answer went out, so none is recorded.
    if (!options.edge.recordsAnswers || call.cancelled) return
    const outcome: Outcome | undefined = answer.type === 'preflight' ? undefined : answer.outcome
    options.edge.answered({
      method: decided.method,
      target: decided.target,
      requestId,
      status,
      durationMs: performance.now() - started,
      outcome,
      span,
    })
  }
  if (!isPromiseLike(decided.answer)) {
    respond(decided.answer)
    return
  }
  decided.answer.then(respond, (error: unknown) => {
    options.logger.error({ err: error, reqId: requestId }, 'decision failed')
    span?.end(500)
    callback({ code: grpc.status.INTERNAL, details: 'decision failed' })
  })
}

/**
 * The call as the connection its span is ended with (`endedOnClose`): Envoy cancelling the
 * Check (its timeout, or its client gone: RST_STREAM) is the HTTP listener's hang-up.
 */
function cancelledWith(call: grpc.ServerUnaryCall<CheckRequest, unknown>): RequestConnection {
  return {
    get destroyed() {
      return call.cancelled
    },
    once: (_closed, listener) => call.once('cancelled', listener),
  }
}

/** The CheckResponse of an answer, and the HTTP status it stands for (metrics, logs). */
export function checkResponse(
  answer: Answer,
  requestId: string,
): { status: number; response: Record<string, unknown> } {
  switch (answer.type) {
    case 'allow':
      return {
        status: 200,
        response: {
          status: { code: grpc.status.OK },
          ok_response: {
            headers: options({ ...answer.upstream, 'x-request-id': requestId }),
            headers_to_remove: [...answer.remove],
            response_headers_to_add: options({ ...answer.client, 'x-request-id': requestId }),
          },
        },
      }
    case 'preflight':
      return {
        status: 204,
        response: {
          status: { code: grpc.status.PERMISSION_DENIED },
          denied_response: {
            status: { code: 204 },
            headers: options({ ...answer.headers, 'x-request-id': requestId }),
          },
        },
      }
    case 'refuse': {
      const { response } = answer
      return {
        status: response.status,
        response: {
          status: {
            code:
              response.status === 401 ? grpc.status.UNAUTHENTICATED : grpc.status.PERMISSION_DENIED,
          },
          denied_response: {
            status: { code: response.status },
            headers: options(failureHeaders(response, requestId)),
            body: JSON.stringify(response.body),
          },
        },
      }
    }
    default:
      return answer satisfies never
  }
}

function options(headers: Readonly<Record<string, string>>): HeaderValueOption[] {
  return Object.entries(headers).map(([key, value]) => ({
    header: { key, value },
    append_action: 'OVERWRITE_IF_EXISTS_OR_ADD',
  }))
}

/**
 * The original request's headers as `[name, value, ...]`: `header_map` (Envoy's
 * `encode_raw_headers`, duplicates kept apart) or else the `headers` map (duplicates joined
 * with `,` by Envoy); pseudo-headers left out. `Host` and the scheme come from their fields
 * when the map has none, for the origin the client addressed.
 */
function rawHeadersOf(
  http: NonNullable<NonNullable<NonNullable<CheckRequest['attributes']>['request']>['http']>,
): string[] {
  const raw: string[] = []
  const entries = http.header_map?.headers
    ? http.header_map.headers.map(
        (h) =>
          [h.key ?? '', h.raw_value ? h.raw_value.toString('latin1') : (h.value ?? '')] as const,
      )
    : Object.entries(http.headers ?? {})
  for (const [name, value] of entries) if (!name.startsWith(':')) raw.push(name, value)
  if (http.host && headerOf(raw, 'host') === undefined) raw.push('host', http.host)
  if (http.scheme && headerOf(raw, 'x-forwarded-proto') === undefined) {
    raw.push('x-forwarded-proto', http.scheme)
  }
  return raw
}

function headerOf(raw: readonly string[], name: string): string | undefined {
  for (let i = 0; i < raw.length; i += 2) if (raw[i] === name) return raw[i + 1]
  return undefined
}

/** `ipv4:10.0.0.1:5000`, `[::1]:5000`, `::ffff:10.0.0.1:5000` → the address alone. */
function peerAddress(peer: string): string {
  const plain = peer.replace(/^ipv[46]:/, '')
  const bracketed = /^\[([^\]]+)\]:\d+$/.exec(plain)
  if (bracketed) return bracketed[1] as string
  const colon = plain.lastIndexOf(':')
  return colon === -1 ? plain : plain.slice(0, colon)
}
