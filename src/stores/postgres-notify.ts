/**
 * Cross-instance change delivery over Postgres `LISTEN/NOTIFY`. Every instance keeps one
 * dedicated connection (not a pool client: a pooled connection is handed to other queries
 * and released, and a released connection stops receiving notifications) listening on
 * `tokengate_changes`; mutating store methods `pg_notify` in the same statement as the
 * change, so a notification is sent exactly when the change commits.
 *
 * NOTIFY is fire-and-forget: whatever is sent while the listener is disconnected is lost.
 * So a lost connection emits `resync` at once (caches drop everything rather than serve a
 * revoked token as valid), and again once the listener is re-subscribed, because changes
 * made during the gap were never delivered. A heartbeat query detects a connection that
 * died silently (no FIN, e.g. a dropped network path or a frozen server).
 */
import pg from 'pg'
import type { StoreChange } from './store.ts'

/** The NOTIFY channel shared by every tokengate instance on a database. */
export const CHANGES_CHANNEL = 'tokengate_changes'

/** What the listener logs; pino's `warn(obj, msg)` and `info(obj, msg)` fit. */
export interface WarnLogger {
  warn(obj: object, msg: string): void
  info?(obj: object, msg: string): void
}

export interface ChangeFeedOptions {
  readonly connectionString: string
  /**
   * Receives every notified change with the `origin` of the instance that made it (so a
   * store can skip its own, already delivered in-process), and `resync` with no origin.
   */
  readonly onChange: (change: StoreChange, origin: string | undefined) => void
  readonly logger?: WarnLogger | undefined
  /** Interval of the `SELECT 1` liveness check on the listening connection. Default 5000. */
  readonly heartbeatMs?: number | undefined
  /** A heartbeat (or connect) slower than this counts as a lost connection. Default 3000. */
  readonly timeoutMs?: number | undefined
  /** First reconnect delay; doubles per failed attempt up to `reconnectMaxMs`. Default 100. */
  readonly reconnectInitialMs?: number | undefined
  /** Default 5000. */
  readonly reconnectMaxMs?: number | undefined
}

/** Serialises a change into a NOTIFY payload (well under Postgres' 8000-byte limit). */
export function encodeChange(change: StoreChange, origin: string): string {
  return JSON.stringify({ ...change, origin })
}

/**
 * Parses a NOTIFY payload. Anything unrecognised (e.g. a kind added by a newer version
 * during a rolling upgrade) becomes `resync`: dropping every cache is always safe, while
 * ignoring a change we cannot read could keep a revoked token valid.
 */
export function decodeChange(payload: string | undefined): {
  change: StoreChange
  origin: string | undefined
} {
  let value: unknown
  try {
    value = JSON.parse(payload ?? '')
  } catch {
    return { change: { kind: 'resync' }, origin: undefined }
  }
  if (typeof value !== 'object' || value === null) {
    return { change: { kind: 'resync' }, origin: undefined }
  }
  const v = value as Record<string, unknown>
  const origin = typeof v.origin === 'string' ? v.origin : undefined
  if (v.kind === 'pat_changed' && typeof v.id === 'string' && typeof v.tokenHash === 'string') {
    return { change: { kind: 'pat_changed', id: v.id, tokenHash: v.tokenHash }, origin }
  }
  if (v.kind === 'tenant_changed' && typeof v.id === 'string') {
    return { change: { kind: 'tenant_changed', id: v.id }, origin }
  }
  if (v.kind === 'issuers_changed') return { change: { kind: 'issuers_changed' }, origin }
  return { change: { kind: 'resync' }, origin: undefined }
}

/**
 * The listening side of change delivery, with heartbeat and reconnection. Create it with
 * `startChangeFeed`, which resolves once the first `LISTEN` is in place.
 */
export class ChangeFeed {
  readonly #options: ChangeFeedOptions
  readonly #heartbeatMs: number
  readonly #timeoutMs: number
  readonly #reconnectInitialMs: number
  readonly #reconnectMaxMs: number
  #client: pg.Client | undefined
  #backendPid: number | undefined
  #heartbeat: NodeJS.Timeout | undefined
  #reconnect: NodeJS.Timeout | undefined
  #attempt = 0
  #closed = false
  #beating = false

  constructor(options: ChangeFeedOptions) {
    this.#options = options
    this.#heartbeatMs = options.heartbeatMs ?? 5000
    this.#timeoutMs = options.timeoutMs ?? 3000
    this.#reconnectInitialMs = options.reconnectInitialMs ?? 100
    this.#reconnectMaxMs = options.reconnectMaxMs ?? 5000
  }

  /** True while the `LISTEN` connection is up and subscribed. */
  get connected(): boolean {
    return this.#client !== undefined
  }

  /** Server process id of the listening connection (for `pg_terminate_backend` in tests). */
  get backendPid(): number | undefined {
    return this.#backendPid
  }

  /** Connects and subscribes; rejects when the first attempt fails. */
  async start(): Promise<void> {
    await this.#connect()
  }

  async close(): Promise<void> {
    this.#closed = true
    clearTimeout(this.#reconnect)
    clearInterval(this.#heartbeat)
    const client = this.#client
    this.#client = undefined
    this.#backendPid = undefined
    if (client) await endClient(client, this.#timeoutMs)
  }

  async #connect(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.#options.connectionString,
      connectionTimeoutMillis: this.#timeoutMs,
      keepAlive: true,
      application_name: 'tokengate-listen',
    })
    // `dead` catches a connection lost between LISTEN and becoming current, when #lost
    // would still ignore it.
    let dead = false
    const lost = (error?: Error) => {
      dead = true
      this.#lost(client, error)
    }
    client.on('error', lost)
    client.on('end', () => lost())
    client.on('notification', (message) => {
      if (client !== this.#client || message.channel !== CHANGES_CHANNEL) return
      const { change, origin } = decodeChange(message.payload)
      if (change.kind === 'resync') {
        this.#options.logger?.warn({ channel: message.channel }, 'unrecognised store change')
      }
      this.#options.onChange(change, origin)
    })
    try {
      await client.connect()
      await client.query(`LISTEN ${CHANGES_CHANNEL}`)
      const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')
      if (dead) throw new Error('listen connection lost while subscribing')
      if (this.#closed) {
        await endClient(client, this.#timeoutMs)
        return
      }
      this.#client = client
      this.#backendPid = rows[0]?.pid
      this.#heartbeat = setInterval(() => this.#beat(client), this.#heartbeatMs)
      this.#heartbeat.unref()
    } catch (error) {
      await endClient(client, this.#timeoutMs)
      throw error
    }
  }

  /** Forgets a broken client, tells listeners to drop caches, and starts reconnecting. */
  #lost(client: pg.Client, error?: Error): void {
    if (client !== this.#client) return
    this.#client = undefined
    this.#backendPid = undefined
    clearInterval(this.#heartbeat)
    void endClient(client, this.#timeoutMs)
    this.#options.logger?.warn(
      { err: error },
      'store change feed lost; dropping caches and reconnecting',
    )
    this.#options.onChange({ kind: 'resync' }, undefined)
    this.#scheduleReconnect()
  }

  #scheduleReconnect(): void {
    if (this.#closed) return
    const ceiling = Math.min(this.#reconnectMaxMs, this.#reconnectInitialMs * 2 ** this.#attempt)
    // Equal jitter: N instances that lost Postgres together do not reconnect in lockstep.
    const delay = ceiling / 2 + Math.random() * (ceiling / 2)
    this.#attempt++
    this.#reconnect = setTimeout(() => {
      this.#connect().then(
        () => {
          if (this.#closed) return
          this.#options.logger?.info?.(
            { attempts: this.#attempt },
            'store change feed reconnected; caches were dropped, changes are pushed again',
          )
          this.#attempt = 0
          // Changes committed while we were away were never delivered.
          this.#options.onChange({ kind: 'resync' }, undefined)
        },
        (error: unknown) => {
          // An attempt already under way when close() was called may still fail: that is
          // the close, not an outage, and nothing is retried.
          if (this.#closed) return
          this.#options.logger?.warn({ err: error }, 'store change feed reconnect failed')
          this.#scheduleReconnect()
        },
      )
    }, delay)
    this.#reconnect.unref()
  }

  #beat(client: pg.Client): void {
    // One heartbeat at a time: a slow one is already racing its own timeout.
    if (this.#beating) return
    this.#beating = true
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('heartbeat timed out')), this.#timeoutMs)
    })
    Promise.race([client.query('SELECT 1'), timeout]).then(
      () => {
        clearTimeout(timer)
        this.#beating = false
      },
      (error: unknown) => {
        clearTimeout(timer)
        this.#beating = false
        this.#lost(client, error instanceof Error ? error : new Error(String(error)))
      },
    )
  }
}

/** Creates a change feed and waits for its first subscription. */
export async function startChangeFeed(options: ChangeFeedOptions): Promise<ChangeFeed> {
  const feed = new ChangeFeed(options)
  await feed.start()
  return feed
}

/** Ends a client politely, or destroys its socket when the server does not answer in time. */
async function endClient(client: pg.Client, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const timedOut = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, timeoutMs)
  })
  await Promise.race([client.end().catch(() => {}), timedOut])
  clearTimeout(timer)
  client.connection.stream.destroy()
}
