/**
 * The chaos suite's load: requests evenly paced over several instances, each one recorded
 * (which credential, which instance, when it was sent and answered, the status and the
 * problem code, or the socket error), so that what survived can be counted afterwards.
 *
 * Why not bench/paced-load.ts as it is: it reports aggregates for one target and counts a
 * killed server's sockets only as failures; here every request has to be traced back to
 * its credential, instance and time, across instances that die and come back. Its pacing
 * idea stays: request i is due at start + i / rate, whatever happened to the ones before.
 */
import http from 'node:http'

/** One credential the load sends, and what it is expected to get. */
export interface Credential {
  /** `valid`, `invalid` (fails the format check), `unknown` (well-formed, not in the store),
   * `revoked` (before the run) or `revoking` (revoked during the run). */
  readonly kind: 'valid' | 'invalid' | 'unknown' | 'revoked' | 'revoking'
  readonly token: string
  /** The PAT's id, for those in the store (for a JWT: a name the suite gives it). */
  readonly id?: string
  /** A JWT's tenant, sent as `X-Tenant-Id`. */
  readonly tenant?: string
}

/** One request of the run. Times are `performance.now()` of this process, in ms. */
export interface Sent {
  readonly credential: Credential
  readonly instance: string
  readonly requestId: string
  readonly sentAt: number
  answeredAt: number
  /** The HTTP status; 0 when no answer came (see `error`). */
  status: number
  /** The problem `code` of a non-2xx answer. */
  code: string | undefined
  /** Why there was no answer: the socket error's code, or `timeout`. */
  error: string | undefined
}

export interface LoadOptions {
  /** Instance name -> base URL (`http://127.0.0.1:PORT`). */
  readonly instances: Readonly<Record<string, string>>
  readonly credentials: readonly Credential[]
  /** Requests per second, over all instances. */
  readonly rate: number
  /** A request unanswered after this long counts as `timeout`. */
  readonly timeoutMs: number
  /** Prefix of every request's `X-Request-Id` (the audit events carry it). */
  readonly requestIdPrefix: string
}

export interface Load {
  /** Requests sent so far. */
  readonly sent: readonly Sent[]
  /**
   * Sends one request per credential to `instance` at once, beside the paced ones (recorded
   * like them); resolves when all are answered.
   */
  burst(instance: string, credentials: readonly Credential[]): Promise<void>
  /** Stops sending; resolves with every request once each was answered or failed. */
  stop(): Promise<readonly Sent[]>
}

/**
 * Starts sending `GET /api/v1/me`: request i carries credential i mod N, on instance
 * (i + floor(i / N)) mod M, so that every credential is sent to every instance in turn.
 */
export function startLoad(options: LoadOptions): Load {
  const names = Object.keys(options.instances)
  const agents = new Map(
    names.map((name) => [name, new http.Agent({ keepAlive: true, maxSockets: 32 })]),
  )
  const credentials = options.credentials
  const sent: Sent[] = []
  const pending = new Set<Promise<void>>()
  const start = performance.now()
  let next = 0
  let stopped = false

  let bursts = 0
  const send = (i: number) => {
    const credential = credentials[i % credentials.length] as Credential
    const instance = names[(i + Math.floor(i / credentials.length)) % names.length] as string
    return sendTo(instance, credential, `${options.requestIdPrefix}${i}`)
  }
  const sendTo = (instance: string, credential: Credential, requestId: string) => {
    const record: Sent = {
      credential,
      instance,
      requestId,
      sentAt: performance.now(),
      answeredAt: Number.NaN,
      status: 0,
      code: undefined,
      error: undefined,
    }
    sent.push(record)
    const done = exchange(options.instances[instance] as string, record, {
      agent: agents.get(instance) as http.Agent,
      timeoutMs: options.timeoutMs,
    }).finally(() => pending.delete(done))
    pending.add(done)
    return done
  }
  const timer = setInterval(() => {
    const due = Math.floor(((performance.now() - start) * options.rate) / 1000)
    while (!stopped && next <= due) void send(next++)
  }, 5)

  return {
    sent,
    async burst(instance, burst) {
      const prefix = `${options.requestIdPrefix}burst${++bursts}-`
      await Promise.all(burst.map((credential, i) => sendTo(instance, credential, prefix + i)))
    },
    async stop() {
      stopped = true
      clearInterval(timer)
      while (pending.size > 0) await Promise.allSettled([...pending])
      for (const agent of agents.values()) agent.destroy()
      return sent
    },
  }
}

/** One request: fills in `record` with the answer or the error; never rejects. */
function exchange(
  base: string,
  record: Sent,
  options: { agent: http.Agent; timeoutMs: number },
): Promise<void> {
  return new Promise((resolve) => {
    const finish = (fields: Partial<Sent>) => {
      if (!Number.isNaN(record.answeredAt)) return
      Object.assign(record, fields, { answeredAt: performance.now() })
      resolve()
    }
    const req = http.request(
      `${base}/api/v1/me`,
      {
        agent: options.agent,
        headers: {
          authorization: `Bearer ${record.credential.token}`,
          'x-request-id': record.requestId,
          ...(record.credential.tenant ? { 'x-tenant-id': record.credential.tenant } : {}),
        },
        timeout: options.timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('error', (error: NodeJS.ErrnoException) => finish({ error: error.code ?? 'error' }))
        res.on('end', () => {
          const status = res.statusCode ?? 0
          let code: string | undefined
          if (status >= 300) {
            try {
              code = (JSON.parse(Buffer.concat(chunks).toString()) as { code?: string }).code
            } catch {
              code = 'not_json'
            }
          }
          finish({ status, code })
        })
      },
    )
    req.on('timeout', () => {
      finish({ error: 'timeout' })
      req.destroy()
    })
    req.on('error', (error: NodeJS.ErrnoException) => finish({ error: error.code ?? 'error' }))
    req.end()
  })
}
