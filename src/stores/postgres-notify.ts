/**
 * The wake-up for the change log (change-log.ts): every instance keeps one dedicated
 * connection (not a pool client: a pooled connection is handed to other queries and
 * released, and a released connection stops receiving notifications) listening on
 * `tokengate_changes`, where the change-log trigger notifies on every logged change. A
 * notification only makes the follower read the log now instead of at its next poll; so does
 * every (re)connection, since notifications sent while disconnected are lost. A heartbeat
 * query detects a connection that died silently (no FIN, e.g. a dropped network path or a
 * frozen server).
 *
 * Behind PgBouncer in transaction pooling LISTEN never delivers: give the listener a direct
 * connection (`databaseListenUrl`) for ~ms wake-ups, or rely on the poll.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'

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
   * Called on every notification, after every (re)subscription, and when the connection is
   * lost (a read of the log then tells whether Postgres itself is gone).
   */
  readonly onWake: () => void
  readonly logger?: WarnLogger | undefined
  /** Interval of the `SELECT 1` liveness check on the listening connection. Default 5000. */
  readonly heartbeatMs?: number | undefined
  /** A heartbeat (or connect) slower than this counts as a lost connection. Default 3000. */
  readonly timeoutMs?: number | undefined
  /** First reconnect delay; doubles per failed attempt up to `reconnectMaxMs`. Default 100. */
  readonly reconnectInitialMs?: number | undefined
  /** Default 5000. */
  readonly reconnectMaxMs?: number | undefined
  /**
   * Sends `NOTIFY channel` through another connection (the store's pool): after each
   * subscription the feed checks that a notification reaches it, and warns once when none
   * does (LISTEN through PgBouncer in transaction pooling). Omitted: no check.
   */
  readonly sendProbe?: ((channel: string) => Promise<unknown>) | undefined
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
  // A channel of this feed alone, for the delivery check.
  readonly #probeChannel = `tokengate_probe_${randomBytes(8).toString('hex')}`
  #delivering: boolean | undefined
  #probeTimer: NodeJS.Timeout | undefined
  #warnedDeaf = false

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

  /**
   * Whether a notification sent through another connection reached this one since the last
   * subscription; undefined until known (or without `sendProbe`).
   */
  get delivering(): boolean | undefined {
    return this.#delivering
  }

  /** Server process id of the listening connection (for `pg_terminate_backend` in tests). */
  get backendPid(): number | undefined {
    return this.#backendPid
  }

  /** Connects and subscribes; rejects when the first attempt fails. */
  async start(): Promise<void> {
    await this.#connect()
    this.#options.onWake()
  }

  async close(): Promise<void> {
    this.#closed = true
    clearTimeout(this.#reconnect)
    clearTimeout(this.#probeTimer)
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
      if (client !== this.#client) return
      if (message.channel === CHANGES_CHANNEL) this.#options.onWake()
      else if (message.channel === this.#probeChannel) {
        clearTimeout(this.#probeTimer)
        this.#delivering = true
      }
    })
    try {
      await client.connect()
      await client.query(`LISTEN ${CHANGES_CHANNEL}`)
      if (this.#options.sendProbe) await client.query(`LISTEN ${this.#probeChannel}`)
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
      this.#probe()
    } catch (error) {
      await endClient(client, this.#timeoutMs)
      throw error
    }
  }

  /**
   * Checks that LISTEN delivers: through PgBouncer in transaction pooling it connects and
   * subscribes fine, then hears nothing, and nothing else would ever say so.
   */
  #probe(): void {
    const send = this.#options.sendProbe
    if (!send) return
    this.#delivering = undefined
    clearTimeout(this.#probeTimer)
    this.#probeTimer = setTimeout(() => {
      if (this.#closed || this.#client === undefined) return
      this.#delivering = false
      if (this.#warnedDeaf) return
      this.#warnedDeaf = true
      this.#options.logger?.warn(
        {},
        'store change feed: LISTEN is connected but no notification reaches it (PgBouncer in transaction pooling?); changes still arrive by polling (store.changePollMs); set databaseListenUrl to Postgres itself for immediate delivery',
      )
    }, this.#timeoutMs)
    this.#probeTimer.unref()
    send(this.#probeChannel).catch(() => {})
  }

  /** Forgets a broken client and starts reconnecting (the follower's poll goes on). */
  #lost(client: pg.Client, error?: Error): void {
    if (client !== this.#client) return
    this.#client = undefined
    this.#backendPid = undefined
    clearInterval(this.#heartbeat)
    void endClient(client, this.#timeoutMs)
    this.#options.logger?.warn(
      { err: error },
      'store change feed (LISTEN) lost; reconnecting, changes still arrive by polling',
    )
    this.#options.onWake()
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
          // Notifications sent while we were away were never delivered: read the log now.
          this.#options.onWake()
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
