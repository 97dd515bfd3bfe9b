/**
 * The receiver's side of an SSF transmitter's management API (SSF 1.0 §7): its configuration
 * document, the stream (adopted or created), and polling (RFC 8936). Every request goes to
 * the transmitter's origin (or an origin the operator allowed) with the receiver's bearer
 * token, never follows a redirect and reads at most 1 MiB: the documents are data from the
 * network, and following any URL they name would let whoever spoofs them aim our requests,
 * token included, at internal services.
 */
import { Buffer } from 'node:buffer'
import { checkJwksUrl, discoveryUrl, fetchMetadata } from '../core/jwks.ts'
import { CAEP_EVENT, DELIVERY_METHOD, SSF_CONFIGURATION_PATH } from './events.ts'

/** The parts of a transmitter's configuration document (SSF 1.0 §7.1.1) a receiver uses. */
export interface TransmitterConfiguration {
  readonly issuer: string
  readonly deliveryMethods: readonly string[]
  readonly configurationEndpoint: URL | undefined
  readonly statusEndpoint: URL | undefined
  readonly verificationEndpoint: URL | undefined
}

export interface StreamClientOptions {
  readonly transmitter: string
  /** Origins besides the transmitter's that its endpoints may be on. */
  readonly origins: readonly string[]
  /** Sent as `Authorization: Bearer ...` to the management API and the poll endpoint. */
  readonly bearerToken: string | undefined
  readonly timeoutMs: number
  readonly fetch: typeof globalThis.fetch
}

/** The stream in use and where to poll it. */
export interface Stream {
  readonly streamId: string
  /** RFC 8936: the transmitter's poll URL; undefined for push. */
  readonly pollUrl: URL | undefined
}

const MAX_RESPONSE_BYTES = 1024 * 1024

/** The event types a stream created by tokengate asks for: the three it acts on. */
export const REQUESTED_EVENTS = [
  CAEP_EVENT.sessionRevoked,
  CAEP_EVENT.credentialChange,
  CAEP_EVENT.tokenClaimsChange,
]

export function createStreamClient(options: StreamClientOptions) {
  const document = discoveryUrl(options.transmitter, SSF_CONFIGURATION_PATH)
  const allowed = new Set([document.origin, ...options.origins.map((o) => new URL(o).origin)])
  const endpoint = (value: unknown, name: string): URL | undefined => {
    if (value === undefined) return undefined
    if (typeof value !== 'string') throw new Error(`the SSF configuration's ${name} is not a URL`)
    const url = checkJwksUrl(value)
    if (!allowed.has(url.origin)) {
      throw new Error(
        `the SSF configuration's ${name} is on ${url.origin}, not the transmitter's origin`,
      )
    }
    return url
  }

  async function request(
    method: 'GET' | 'POST',
    url: URL,
    body?: unknown,
  ): Promise<{ status: number; json: unknown }> {
    const headers: Record<string, string> = { accept: 'application/json' }
    if (options.bearerToken !== undefined) headers.authorization = `Bearer ${options.bearerToken}`
    if (body !== undefined) headers['content-type'] = 'application/json'
    const response = await options.fetch(url, {
      method,
      headers,
      redirect: 'manual',
      signal: AbortSignal.timeout(options.timeoutMs),
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    const text = await readCapped(response)
    let json: unknown
    try {
      json = text === '' ? undefined : JSON.parse(text)
    } catch {
      json = undefined
    }
    return { status: response.status, json }
  }

  return {
    /** Reads the configuration document; its `issuer` must be exactly the transmitter. */
    async configuration(): Promise<TransmitterConfiguration> {
      const read = (await fetchMetadata(
        document,
        AbortSignal.timeout(options.timeoutMs),
        options.fetch,
      )) as Record<string, unknown> | null
      if (read === null || typeof read !== 'object') throw new Error('not an SSF configuration')
      if (read.issuer !== options.transmitter) {
        throw new Error('the SSF configuration names another issuer')
      }
      const methods = Array.isArray(read.delivery_methods_supported)
        ? read.delivery_methods_supported.filter((m): m is string => typeof m === 'string')
        : []
      return {
        issuer: options.transmitter,
        deliveryMethods: methods,
        configurationEndpoint: endpoint(read.configuration_endpoint, 'configuration_endpoint'),
        statusEndpoint: endpoint(read.status_endpoint, 'status_endpoint'),
        verificationEndpoint: endpoint(read.verification_endpoint, 'verification_endpoint'),
      }
    },

    /**
     * The stream to use: `streamId` when configured (adopted), else one of ours with the same
     * delivery (and push URL), else a new one (SSF 1.0 §7.1.1.1). A transmitter that allows
     * one stream per receiver answers 409 to a second creation: the existing one is adopted.
     */
    async stream(
      config: TransmitterConfiguration,
      delivery: { method: 'push'; endpointUrl: string } | { method: 'poll' },
      streamId: string | undefined,
    ): Promise<Stream> {
      const at = config.configurationEndpoint
      if (at === undefined) {
        if (streamId !== undefined && delivery.method === 'push') {
          return { streamId, pollUrl: undefined }
        }
        throw new Error('the SSF configuration has no configuration_endpoint')
      }
      const method = DELIVERY_METHOD[delivery.method]
      if (streamId !== undefined) {
        const url = new URL(at)
        url.searchParams.set('stream_id', streamId)
        const read = await request('GET', url)
        if (read.status !== 200) throw new Error(`reading stream ${streamId}: ${read.status}`)
        return adopt(read.json, streamId)
      }
      const matching = async (): Promise<Stream | undefined> => {
        const listed = await request('GET', at)
        if (listed.status !== 200) return undefined
        const streams = Array.isArray(listed.json) ? listed.json : [listed.json]
        const ours = streams.find((s) => {
          const d = (s as { delivery?: { method?: unknown; endpoint_url?: unknown } } | null)
            ?.delivery
          return (
            d?.method === method &&
            (delivery.method === 'poll' || d.endpoint_url === delivery.endpointUrl)
          )
        })
        return ours === undefined ? undefined : adopt(ours, undefined)
      }
      const existing = await matching()
      if (existing !== undefined) return existing
      const created = await request('POST', at, {
        delivery:
          delivery.method === 'push' ? { method, endpoint_url: delivery.endpointUrl } : { method },
        events_requested: REQUESTED_EVENTS,
        description: 'tokengate: JWT revocation rules',
      })
      if (created.status === 409) {
        const now = await matching()
        if (now !== undefined) return now
      }
      if (created.status !== 201 && created.status !== 200) {
        throw new Error(`creating the stream: ${created.status}`)
      }
      return adopt(created.json, undefined)
    },

    /**
     * Asks the transmitter for a verification event carrying `state` (SSF 1.0 §8.1.4.2);
     * true when it accepted the request (204).
     */
    async requestVerification(
      config: TransmitterConfiguration,
      streamId: string,
      state: string,
    ): Promise<boolean> {
      if (config.verificationEndpoint === undefined) return false
      const asked = await request('POST', config.verificationEndpoint, {
        stream_id: streamId,
        state,
      })
      return asked.status === 204 || asked.status === 200
    },

    /** The stream's status (SSF 1.0 §7.1.2), or undefined when it cannot be read. */
    async status(config: TransmitterConfiguration, streamId: string): Promise<string | undefined> {
      if (config.statusEndpoint === undefined) return undefined
      const url = new URL(config.statusEndpoint)
      url.searchParams.set('stream_id', streamId)
      const read = await request('GET', url)
      const status = (read.json as { status?: unknown } | undefined)?.status
      return read.status === 200 && typeof status === 'string' ? status.slice(0, 32) : undefined
    },

    /**
     * One RFC 8936 poll: acknowledges `ack` and reports `setErrs`, returns the SETs by jti.
     * `returnImmediately`: the receiver polls on its own interval, no request is held open.
     */
    async poll(
      url: URL,
      ack: readonly string[],
      setErrs: Readonly<Record<string, { err: string; description: string }>>,
      maxEvents: number,
    ): Promise<{ sets: Map<string, string>; moreAvailable: boolean }> {
      const body: Record<string, unknown> = { ack, maxEvents, returnImmediately: true }
      if (Object.keys(setErrs).length > 0) body.setErrs = setErrs
      const answer = await request('POST', url, body)
      if (answer.status !== 200) throw new Error(`poll answered ${answer.status}`)
      const { sets, moreAvailable } = (answer.json ?? {}) as {
        sets?: unknown
        moreAvailable?: unknown
      }
      const found = new Map<string, string>()
      if (typeof sets === 'object' && sets !== null && !Array.isArray(sets)) {
        for (const [jti, set] of Object.entries(sets)) {
          if (typeof set === 'string' && found.size < maxEvents) found.set(jti, set)
        }
      }
      return { sets: found, moreAvailable: moreAvailable === true }
    },
  }

  function adopt(value: unknown, expectedId: string | undefined): Stream {
    const read = (value ?? {}) as {
      stream_id?: unknown
      delivery?: { method?: unknown; endpoint_url?: unknown }
    }
    const streamId = typeof read.stream_id === 'string' ? read.stream_id : expectedId
    if (streamId === undefined) throw new Error('the transmitter named no stream_id')
    const poll = read.delivery?.method === DELIVERY_METHOD.poll
    return {
      streamId,
      pollUrl: poll ? endpoint(read.delivery?.endpoint_url, 'poll endpoint_url') : undefined,
    }
  }
}

export type StreamClient = ReturnType<typeof createStreamClient>

async function readCapped(response: Response): Promise<string> {
  if (response.body === null) return ''
  const chunks: Uint8Array[] = []
  let total = 0
  for await (const chunk of response.body) {
    total += chunk.byteLength
    if (total > MAX_RESPONSE_BYTES) throw new Error('the transmitter answer is too large')
    chunks.push(chunk)
  }
  return Buffer.concat(chunks).toString('utf8')
}
