/**
 * The configured CAEP/SSF receivers (`ssf.receivers`) made ready for main.ts: secrets read
 * from their files (never logged), settings checked, the push route built. Streams are set
 * up and polled only after the API listener is up (`start`), and stop with it (`close`).
 */
import { readFile } from 'node:fs/promises'
import type { EndpointThrottle } from '../auth/address-throttle.ts'
import type { Config } from '../config/schema.ts'
import { DEFAULT_ALGORITHMS } from '../core/issuer.ts'
import type { Clock } from '../core/ports.ts'
import type { Store } from '../stores/store.ts'
import {
  createSsfReceiver,
  type ReceiverDeps,
  type ReceiverLog,
  type SsfReceiver,
} from './receiver.ts'
import { ssfPushRoutes } from './receiver-push.ts'

export interface SsfReceivers {
  readonly receivers: readonly SsfReceiver[]
  /** Mounts `POST /ssf/events/<name>` on the API listener. */
  readonly mount: ReturnType<typeof ssfPushRoutes>
  start(): void
  close(): Promise<void>
}

type ReceiverConfig = Config['ssf']['receivers'][number]

export async function createSsfReceivers(
  config: Readonly<Config>,
  deps: {
    store: Store
    clock: Clock
    log: ReceiverLog
    fetch?: typeof globalThis.fetch
    /** The failed-auth limit the push route's refusals count against (per address). */
    throttle?: EndpointThrottle
    metrics?: ReceiverDeps['metrics']
  },
): Promise<SsfReceivers | undefined> {
  const configured = config.ssf.receivers
  if (configured.length === 0) return undefined
  const names = new Set<string>()
  const receivers: SsfReceiver[] = []
  for (const [index, r] of configured.entries()) {
    const at = `ssf.receivers[${index}]`
    if (names.has(r.name)) throw new Error(`${at}.name: ${r.name} is used twice`)
    names.add(r.name)
    const delivery = r.delivery ?? 'push'
    if (delivery === 'push' && r.streamId === undefined && r.pushUrl === undefined) {
      throw new Error(
        `${at}: push delivery needs pushUrl (our endpoint for the stream tokengate creates) or streamId (a stream set up at the transmitter)`,
      )
    }
    receivers.push(
      createSsfReceiver(
        {
          name: r.name,
          transmitter: r.transmitter,
          jwtIssuer: r.jwtIssuer ?? r.transmitter,
          audience: r.audience,
          delivery,
          pushUrl: r.pushUrl,
          streamId: r.streamId,
          bearerToken: await secret(r, 'bearerTokenFile', at),
          pushAuthorization: await secret(r, 'pushAuthorizationFile', at),
          origins: r.origins ?? [],
          algorithms: r.algorithms ?? DEFAULT_ALGORITHMS,
          pollIntervalMs: r.pollIntervalMs ?? 1_000,
          maxEvents: r.maxEvents ?? 100,
          maxSetAgeSec: r.maxSetAgeSec ?? 86_400,
          timeoutMs: r.timeoutMs ?? 5_000,
        },
        {
          store: deps.store,
          clock: deps.clock,
          log: deps.log,
          fetch: deps.fetch,
          metrics: deps.metrics,
          lifetime: {
            maxLifetimeSec: config.auth.maxJwtLifetimeSec,
            clockToleranceSec: config.auth.clockToleranceSec,
          },
        },
      ),
    )
  }
  let pruning: NodeJS.Timeout | undefined
  let pruned: Promise<void> | undefined
  return {
    receivers,
    mount: ssfPushRoutes(receivers, config.ssf.maxPushBytes, deps.throttle),
    start() {
      for (const receiver of receivers) receiver.start()
      pruning = setInterval(() => {
        pruned ??= pruneReceived(deps.store, deps.clock.now(), deps.log).finally(() => {
          pruned = undefined
        })
      }, PRUNE_EVERY_MS)
      pruning.unref()
    },
    async close() {
      clearInterval(pruning)
      await pruned
      await Promise.all(receivers.map((receiver) => receiver.close()))
    },
  }
}

const PRUNE_EVERY_MS = 3_600_000
const PRUNE_BATCH = 1_000

/** Deletes the replay records that can no longer matter (their SET would be too old now). */
async function pruneReceived(store: Store, now: number, log: ReceiverLog): Promise<void> {
  try {
    let deleted = 0
    for (;;) {
      const batch = await store.pruneSsfReceived(now, PRUNE_BATCH)
      deleted += batch
      if (batch < PRUNE_BATCH) break
    }
    if (deleted > 0) log.info({ deleted }, 'SSF: expired SET ids pruned')
  } catch (error) {
    log.warn(
      { reason: (error as Error).message },
      'SSF: pruning SET ids failed; retried in an hour',
    )
  }
}

/** A secret file's first line (one trailing newline trimmed), or undefined when not set. */
async function secret(
  r: ReceiverConfig,
  field: 'bearerTokenFile' | 'pushAuthorizationFile',
  at: string,
): Promise<string | undefined> {
  const file = r[field]
  if (file === undefined) return undefined
  const text = await readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => {
    throw new Error(`${at}.${field} ${file}: cannot be read (${error.code ?? 'error'})`)
  })
  const value = text.replace(/\r?\n$/, '')
  if (value.length === 0 || value.includes('\n')) {
    throw new Error(`${at}.${field} ${file}: expected one line holding the secret`)
  }
  return value
}
