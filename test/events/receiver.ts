/**
 * A real webhook receiver on 127.0.0.1 for delivery tests: records every POST (headers and
 * the exact body bytes) and answers as `mode` says. It can be stopped and started again on
 * the same port, to play a receiver that is down and comes back.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { WebhookEvent } from '../../src/events/webhook.ts'

export interface Delivery {
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
  readonly events: WebhookEvent[]
  readonly receivedAt: number
}

export type ReceiverMode = 'ok' | 'fail' | 'hang'

export interface Receiver {
  readonly url: string
  readonly deliveries: Delivery[]
  mode: ReceiverMode
  /** Seconds sent as Retry-After with a `fail` answer, when set. */
  retryAfter: number | undefined
  /** Every event id received (duplicates included, in arrival order). */
  eventIds(): string[]
  /** Resolves once `count` distinct event ids have arrived, or rejects after `timeoutMs`. */
  waitForEvents(count: number, timeoutMs?: number): Promise<void>
  stop(): Promise<void>
  start(): Promise<void>
}

/**
 * `okStatus`: the answer in `ok` mode (a webhook's 204; an RFC 8935 SET receiver's 202).
 * `events`: what a body holds (the webhook's JSON batch by default; none for a SET).
 */
export interface ReceiverOptions {
  readonly okStatus?: number
  readonly events?: (body: string) => WebhookEvent[]
}

const webhookEvents = (body: string) => (JSON.parse(body) as { events: WebhookEvent[] }).events

export async function startReceiver(
  mode: ReceiverMode = 'ok',
  options: ReceiverOptions = {},
): Promise<Receiver> {
  const { okStatus = 204, events = webhookEvents } = options
  let port = 0
  let server: http.Server | undefined
  const hanging = new Set<http.ServerResponse>()
  const receiver: Receiver = {
    url: '',
    deliveries: [],
    mode,
    retryAfter: undefined,
    eventIds: () => receiver.deliveries.flatMap((d) => d.events.map((e) => e.id)),
    async waitForEvents(count, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs
      while (new Set(receiver.eventIds()).size < count) {
        if (Date.now() > deadline) {
          throw new Error(`received ${new Set(receiver.eventIds()).size} of ${count} events`)
        }
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    },
    async stop() {
      const s = server
      server = undefined
      if (!s) return
      for (const res of hanging) res.destroy()
      hanging.clear()
      s.closeAllConnections()
      await new Promise<void>((resolve) => s.close(() => resolve()))
    },
    async start() {
      const s = http.createServer((req, res) => {
        let body = ''
        req.setEncoding('utf8')
        req.on('data', (chunk: string) => {
          body += chunk
        })
        req.on('end', () => {
          if (receiver.mode === 'hang') {
            hanging.add(res)
            return
          }
          if (receiver.mode === 'ok') {
            receiver.deliveries.push({
              headers: req.headers,
              body,
              events: events(body),
              receivedAt: Date.now(),
            })
            res.writeHead(okStatus).end()
            return
          }
          const headers: Record<string, string> = {}
          if (receiver.retryAfter !== undefined)
            headers['retry-after'] = String(receiver.retryAfter)
          res.writeHead(503, headers).end('down for maintenance')
        })
      })
      await new Promise<void>((resolve) => s.listen(port, '127.0.0.1', () => resolve()))
      port = (s.address() as AddressInfo).port
      server = s
      ;(receiver as { url: string }).url = `http://127.0.0.1:${port}/hooks/tokengate`
    },
  }
  await receiver.start()
  return receiver
}
