/**
 * A CAEP/SSF transmitter for tests, following SSF 1.0 §7 and RFC 8935/8936 as an IdP would
 * (no IdP is reachable here), on 127.0.0.1: its configuration document at
 * `/.well-known/ssf-configuration`, its JWKS, stream management (create, read, status,
 * verification) behind a bearer token, an RFC 8936 poll endpoint per stream, and pushes of
 * SETs it signs with its own ES256 key (`typ: secevent+jwt`).
 *
 * Knobs for attacks: `setJwksUri` points the configuration's `jwks_uri` elsewhere, and
 * `/jwks-redirect` answers 302 to the real JWKS.
 */
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { CAEP_EVENT, DELIVERY_METHOD, SET_MEDIA_TYPE, SSF_EVENT } from '../../src/ssf/events.ts'
import { generateTestKeyPair, signCompact } from './jwt.ts'

export interface TestStream {
  readonly id: string
  readonly method: string
  readonly endpointUrl: string
  /** Poll: SETs not yet acknowledged, by jti. */
  readonly queue: Map<string, string>
  /** Poll: jtis the receiver acknowledged, and the errors it reported. */
  readonly acked: string[]
  readonly errors: Record<string, { err: string; description: string }>
}

export interface SsfTestTransmitter {
  /** `http://127.0.0.1:<port>`: the issuer and origin. */
  readonly issuer: string
  readonly bearerToken: string
  /** The `kid` of its signing key. */
  readonly kid: string
  readonly streams: Map<string, TestStream>
  /** Requests per path, to check what a receiver asked for. */
  readonly hits: Map<string, number>
  /** Verification requests received (SSF 1.0 §8.1.4.2), in order. */
  readonly verifications: readonly { streamId: string; state: string | undefined }[]
  /** The `aud` of the verification SETs it sends (the receivers' audience). */
  setAudience(audience: string): void
  /** Signs claims as a SET; `header` is merged over `{ alg, kid, typ }`. */
  sign(claims: Record<string, unknown>, header?: Record<string, unknown>): string
  /** A SET of one event for `audience`, issued now, with a fresh jti. */
  event(
    type: string,
    subId: Record<string, unknown>,
    audience: string,
    eventClaims?: Record<string, unknown>,
  ): { jti: string; claims: Record<string, unknown>; set: string }
  /** Pushes a SET (RFC 8935) to a URL; answers the status and JSON body. */
  push(
    url: string,
    body: string,
    headers?: Record<string, string>,
  ): Promise<{ status: number; json: Record<string, unknown> }>
  /** Queues a SET on a poll stream. */
  enqueue(streamId: string, jti: string, set: string): void
  setJwksUri(uri: string): void
  /** While down, every request is answered 503 (an outage at the identity provider). */
  setDown(down: boolean): void
  close(): Promise<void>
}

export const CAEP = CAEP_EVENT

export async function startSsfTransmitter(): Promise<SsfTestTransmitter> {
  const pair = generateTestKeyPair('ES256')
  const kid = `ssf-${randomUUID().slice(0, 8)}`
  const jwk = { ...pair.publicJwk, kid, alg: 'ES256', use: 'sig' }
  const bearerToken = `tx-${randomUUID()}`
  const streams = new Map<string, TestStream>()
  const hits = new Map<string, number>()
  let issuer = ''
  let jwksUri = ''
  let audience = 'unset'
  const verifications: { streamId: string; state: string | undefined }[] = []
  let down = false

  const json = (response: ServerResponse, status: number, body?: unknown) => {
    if (body === undefined) return response.writeHead(status).end()
    response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
  }
  const readBody = async (request: IncomingMessage): Promise<unknown> => {
    const chunks: Buffer[] = []
    for await (const chunk of request) chunks.push(chunk as Buffer)
    const text = Buffer.concat(chunks).toString('utf8')
    return text === '' ? undefined : JSON.parse(text)
  }
  const streamJson = (s: TestStream) => ({
    stream_id: s.id,
    iss: issuer,
    aud: 'set by the receiver configuration',
    delivery: { method: s.method, endpoint_url: s.endpointUrl },
    events_supported: [...Object.values(CAEP_EVENT), SSF_EVENT.verification],
    events_requested: [CAEP_EVENT.sessionRevoked, CAEP_EVENT.credentialChange],
    events_delivered: [CAEP_EVENT.sessionRevoked, CAEP_EVENT.credentialChange],
  })

  const server = createServer(async (request, response) => {
    const url = new URL(request.url ?? '/', issuer)
    hits.set(url.pathname, (hits.get(url.pathname) ?? 0) + 1)
    if (down) return json(response, 503)
    const authorized = request.headers.authorization === `Bearer ${bearerToken}`
    try {
      if (request.method === 'GET' && url.pathname === '/.well-known/ssf-configuration') {
        return json(response, 200, {
          spec_version: '1_0',
          issuer,
          jwks_uri: jwksUri,
          delivery_methods_supported: [DELIVERY_METHOD.push, DELIVERY_METHOD.poll],
          configuration_endpoint: `${issuer}/ssf/streams`,
          status_endpoint: `${issuer}/ssf/status`,
          verification_endpoint: `${issuer}/ssf/verify`,
          authorization_schemes: [{ spec_urn: 'urn:ietf:rfc:6749' }],
        })
      }
      if (request.method === 'GET' && url.pathname === '/jwks') {
        return json(response, 200, { keys: [jwk] })
      }
      if (url.pathname === '/jwks-redirect') {
        return response.writeHead(302, { location: `${issuer}/jwks` }).end()
      }
      if (url.pathname.startsWith('/ssf/') && !authorized) return json(response, 401)
      if (url.pathname === '/ssf/streams' && request.method === 'POST') {
        const body = (await readBody(request)) as {
          delivery?: { method?: string; endpoint_url?: string }
        }
        const id = randomUUID()
        const method = body.delivery?.method ?? DELIVERY_METHOD.poll
        const stream: TestStream = {
          id,
          method,
          endpointUrl:
            method === DELIVERY_METHOD.poll
              ? `${issuer}/ssf/poll/${id}`
              : (body.delivery?.endpoint_url ?? ''),
          queue: new Map(),
          acked: [],
          errors: {},
        }
        streams.set(id, stream)
        return json(response, 201, streamJson(stream))
      }
      if (url.pathname === '/ssf/streams' && request.method === 'GET') {
        const id = url.searchParams.get('stream_id')
        if (id === null) return json(response, 200, [...streams.values()].map(streamJson))
        const stream = streams.get(id)
        return stream ? json(response, 200, streamJson(stream)) : json(response, 404)
      }
      if (url.pathname === '/ssf/status' && request.method === 'GET') {
        const stream = streams.get(url.searchParams.get('stream_id') ?? '')
        return stream
          ? json(response, 200, { stream_id: stream.id, status: 'enabled' })
          : json(response, 404)
      }
      if (url.pathname === '/ssf/verify' && request.method === 'POST') {
        // SSF 1.0 §8.1.4.2: answered at once, the verification event follows on the stream.
        const body = ((await readBody(request)) ?? {}) as { stream_id?: string; state?: string }
        const stream = streams.get(body.stream_id ?? '')
        if (stream === undefined) return json(response, 404)
        verifications.push({ streamId: stream.id, state: body.state })
        const jti = randomUUID()
        const set = sign({
          iss: issuer,
          jti,
          iat: Math.floor(Date.now() / 1000),
          aud: audience,
          sub_id: { format: 'opaque', id: stream.id },
          events: {
            [SSF_EVENT.verification]: body.state === undefined ? {} : { state: body.state },
          },
        })
        if (stream.method === DELIVERY_METHOD.poll) stream.queue.set(jti, set)
        else {
          fetch(stream.endpointUrl, {
            method: 'POST',
            headers: { 'content-type': SET_MEDIA_TYPE },
            body: set,
          }).catch(() => {})
        }
        return json(response, 204)
      }
      const polled = /^\/ssf\/poll\/([^/]+)$/.exec(url.pathname)
      if (polled && request.method === 'POST') {
        const stream = streams.get(polled[1] as string)
        if (stream === undefined) return json(response, 404)
        // RFC 8936 §2.4: acknowledgements and errors first, then up to maxEvents SETs.
        const body = ((await readBody(request)) ?? {}) as {
          ack?: string[]
          setErrs?: Record<string, { err: string; description: string }>
          maxEvents?: number
        }
        for (const jti of body.ack ?? []) {
          stream.acked.push(jti)
          stream.queue.delete(jti)
        }
        for (const [jti, error] of Object.entries(body.setErrs ?? {})) {
          stream.errors[jti] = error
          stream.queue.delete(jti)
        }
        const max = body.maxEvents ?? 100
        const sets = Object.fromEntries([...stream.queue].slice(0, max))
        return json(response, 200, { sets, moreAvailable: stream.queue.size > max })
      }
      json(response, 404)
    } catch {
      json(response, 400)
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  jwksUri = `${issuer}/jwks`

  const sign = (claims: Record<string, unknown>, header: Record<string, unknown> = {}) =>
    signCompact(
      Object.fromEntries(
        Object.entries({ alg: 'ES256', kid, typ: 'secevent+jwt', ...header }).filter(
          ([, v]) => v !== undefined,
        ),
      ),
      claims,
      pair.privateKey,
      'ES256',
    )

  return {
    issuer,
    bearerToken,
    kid,
    streams,
    hits,
    verifications,
    setAudience(value) {
      audience = value
    },
    setDown(value) {
      down = value
    },
    sign,
    event(type, subId, audience, eventClaims = {}) {
      const jti = randomUUID()
      const nowSec = Math.floor(Date.now() / 1000)
      const claims = {
        iss: issuer,
        jti,
        iat: nowSec,
        aud: audience,
        txn: randomUUID(),
        sub_id: subId,
        events: { [type]: { event_timestamp: nowSec, ...eventClaims } },
      }
      return { jti, claims, set: sign(claims) }
    },
    async push(url, body, headers = {}) {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': SET_MEDIA_TYPE, ...headers },
        body,
        signal: AbortSignal.timeout(10_000),
      })
      const text = await response.text()
      let parsed: Record<string, unknown> = {}
      try {
        parsed = JSON.parse(text)
      } catch {}
      return { status: response.status, json: parsed }
    },
    enqueue(streamId, jti, set) {
      const stream = streams.get(streamId)
      if (stream === undefined) throw new Error(`no stream ${streamId}`)
      stream.queue.set(jti, set)
    },
    setJwksUri(uri) {
      jwksUri = uri
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
