/**
 * A CAEP/SSF receiver for one transmitter (issue #34): each SET, pushed (RFC 8935,
 * receiver-push.ts) or polled (RFC 8936, below), is verified (set-verify.ts), checked for
 * replay across instances (the store's `ssf_received`), mapped to JWT revocation rules
 * (caep-rules.ts) and applied through `revokeJwts`, the operators' own audited operation,
 * so a rule made by the IdP reaches every instance through the change log like any other.
 * Every SET is audited, received or refused; the SET itself is never logged or stored.
 */
import { randomBytes } from 'node:crypto'
import {
  type AuditEvent,
  type AuditSink,
  auditRecord,
  storeAuditSink,
} from '../auth/audit-events.ts'
import { type JwtLifetime, revokeJwts } from '../auth/jwt-revocation-operations.ts'
import { OperationRefused } from '../auth/operations.ts'
import {
  createDiscoveredJwks,
  DEFAULT_JWKS_OPTIONS,
  type JwksOptions,
  type JwksStatus,
  type RemoteJwks,
} from '../core/jwks.ts'
import type { Clock } from '../core/ports.ts'
import type { Store } from '../stores/store.ts'
import { type CaepMapping, mapCaepEvent } from './caep-rules.ts'
import { DELIVERY_METHOD, SSF_CONFIGURATION_PATH, SSF_EVENT } from './events.ts'
import { createStreamClient, type Stream } from './receiver-stream.ts'
import { createSetVerifier, type SetRefusal, type VerifiedSet } from './set-verify.ts'

export interface ReceiverSettings {
  /** Names the receiver in its push path (`/ssf/events/<name>`), the audit and the log. */
  readonly name: string
  /** The transmitter's issuer URL; its configuration is at `/.well-known/ssf-configuration`. */
  readonly transmitter: string
  /** The trusted JWT issuer the rules are made for. */
  readonly jwtIssuer: string
  /** Our audience in the SETs' `aud`. */
  readonly audience: string
  readonly delivery: 'push' | 'poll'
  /** Push: our endpoint URL as the transmitter reaches it (for a stream we create). */
  readonly pushUrl: string | undefined
  /** An existing stream to adopt instead of finding or creating one. */
  readonly streamId: string | undefined
  readonly bearerToken: string | undefined
  /** Push: the exact `Authorization` value the transmitter sends, when it is given one. */
  readonly pushAuthorization: string | undefined
  readonly origins: readonly string[]
  readonly algorithms: readonly string[]
  readonly pollIntervalMs: number
  readonly maxEvents: number
  readonly maxSetAgeSec: number
  readonly timeoutMs: number
}

export interface ReceiverLog {
  info(fields: object, message: string): void
  warn(fields: object, message: string): void
}

export interface ReceiverDeps {
  readonly store: Store
  readonly clock: Clock
  readonly log: ReceiverLog
  readonly lifetime: JwtLifetime
  readonly fetch?: typeof globalThis.fetch
  readonly jwks?: Partial<JwksOptions>
  /** Where audit events go; default the store's (as the leak reports do). */
  readonly audit?: AuditSink
  /** Counts each SET handled (`tokengate_ssf_events_total`, server/metrics.ts). */
  readonly metrics?: { countSsfEvent(receiver: string, outcome: SsfEventOutcome): void }
}

/** What became of a SET, as counted in the metrics. */
export type SsfEventOutcome = 'received' | 'refused' | 'replayed' | 'unavailable'

export type ReceiveOutcome =
  | { readonly ok: true; readonly rules: readonly string[] }
  | (SetRefusal & { readonly replay?: true })

/**
 * What `/readyz` shows of a receiver (server/health.ts). Times are ISO strings; no URL,
 * error text or secret. `degraded`: the stream cannot be set up, the transmitter's keys
 * cannot be fetched, or (poll) no poll has succeeded for {@link POLL_STALE_INTERVALS}
 * intervals plus the request timeout.
 */
export interface ReceiverHealth {
  readonly name: string
  readonly delivery: 'push' | 'poll'
  readonly state: 'ok' | 'degraded'
  /** `starting`: the first setup is under way. */
  readonly stream: 'starting' | 'ready' | 'failing'
  readonly streamFailingSince?: string
  /** The transmitter's JWKS: `fresh`, `stale` (refresh due or failing) or `unavailable`. */
  readonly keys: 'fresh' | 'stale' | 'unavailable'
  readonly keysFailingSince?: string
  /** Poll: the last successful poll (null: none yet). */
  readonly lastPoll?: string | null
  readonly pollFailingSince?: string
}

/** A poll receiver is degraded after this many intervals (plus one timeout) without a poll. */
export const POLL_STALE_INTERVALS = 10

export interface SsfReceiver {
  readonly name: string
  /** The receiver's state for readiness; also starts a background key refresh when due. */
  health(): ReceiverHealth
  /** What a push or poll delivers: verified, replay-checked, applied and audited. */
  receive(
    token: string,
    delivery: 'push' | 'poll',
    request?: { clientAddress?: string; requestId?: string },
  ): Promise<ReceiveOutcome>
  /** Audits a push refused before its SET was read (authorization, size, media type). */
  refuse(
    refusal: SetRefusal,
    request?: { clientAddress?: string; requestId?: string },
  ): Promise<void>
  readonly pushAuthorization: string | undefined
  /** Finds or creates the stream and, for poll, starts polling; retries in the background. */
  start(): void
  close(): Promise<void>
}

/** A failed stream setup is retried after 1 s, doubling up to 30 s. */
const RETRY_SETUP_FIRST_MS = 1_000
const RETRY_SETUP_MAX_MS = 30_000

export function createSsfReceiver(settings: ReceiverSettings, deps: ReceiverDeps): SsfReceiver {
  const { store, clock, log } = deps
  const fetchImpl = deps.fetch ?? ((input, init) => globalThis.fetch(input, init))
  const audit = deps.audit ?? storeAuditSink(store, () => clock.now())
  const actor = `ssf:${settings.name}`
  const keys = createDiscoveredJwks(
    { issuer: settings.transmitter, algorithms: settings.algorithms },
    { ...DEFAULT_JWKS_OPTIONS, ...deps.jwks },
    { clock, fetch: fetchImpl },
    settings.origins,
    SSF_CONFIGURATION_PATH,
  ) as ReturnType<typeof createDiscoveredJwks> & Partial<Pick<RemoteJwks, 'status' | 'warm'>>
  // Unpooled (no `pool` in the deps) the source is a RemoteJwks, whose status readiness shows.
  const keyStatus = (): JwksStatus['state'] | undefined => keys.status?.().state
  const keysFailingSince = (): number | null => keys.status?.().failingSince ?? null
  const verify = createSetVerifier({
    issuer: settings.transmitter,
    audience: settings.audience,
    keys,
    algorithms: settings.algorithms,
    clock,
    clockToleranceSec: deps.lifetime.clockToleranceSec,
    maxAgeSec: settings.maxSetAgeSec,
  })
  const client = createStreamClient({
    transmitter: settings.transmitter,
    origins: settings.origins,
    bearerToken: settings.bearerToken,
    timeoutMs: settings.timeoutMs,
    fetch: fetchImpl,
  })
  const base = { receiver: settings.name, transmitter: settings.transmitter }
  const count = (outcome: SsfEventOutcome) => deps.metrics?.countSsfEvent(settings.name, outcome)
  const write = (
    event: AuditEvent,
    request: { clientAddress?: string; requestId?: string } | undefined,
  ) => audit.write(auditRecord(event, { actor, ...request }, clock.now()))

  async function refused(
    refusal: SetRefusal,
    delivery: 'push' | 'poll',
    request: { clientAddress?: string; requestId?: string } | undefined,
    replay = false,
  ): Promise<ReceiveOutcome> {
    count(replay ? 'replayed' : refusal.err === 'unavailable' ? 'unavailable' : 'refused')
    log.warn({ ...base, delivery, err: refusal.err }, `SSF SET refused: ${refusal.description}`)
    await write(
      {
        type: 'ssf.event_refused',
        tenantId: null,
        outcome: 'refused',
        details: { ...base, delivery, err: refusal.err, reason: refusal.description },
      },
      request,
    )
    return replay ? { ...refusal, replay: true } : refusal
  }

  async function receive(
    token: string,
    delivery: 'push' | 'poll',
    request?: { clientAddress?: string; requestId?: string },
  ): Promise<ReceiveOutcome> {
    const verified = await verify(token)
    if (!verified.ok) return refused(verified, delivery, request)
    const { set } = verified
    const now = clock.now()
    const mapping = mapCaepEvent(
      set,
      { jwtIssuer: settings.jwtIssuer, transmitter: settings.transmitter },
      now,
    )
    try {
      if (
        mapping.kind === 'revoke' &&
        !(await store.listIssuers()).some((i) => i.issuer === settings.jwtIssuer)
      ) {
        return refused(
          {
            ok: false,
            err: 'access_denied',
            description: 'the stream’s JWT issuer is not trusted',
          },
          delivery,
          request,
        )
      }
      // Recorded before it is applied: of two deliveries (two instances polling, a push
      // retried to another instance) exactly one applies it. Kept as long as the SET could
      // still pass the age check.
      const expiresAt =
        set.iat * 1000 + (settings.maxSetAgeSec + deps.lifetime.clockToleranceSec) * 1000 + 1000
      const fresh = await store.recordSsfReceived(settings.transmitter, set.jti, now, expiresAt)
      if (!fresh) {
        return refused(
          { ok: false, err: 'invalid_request', description: 'the SET was received before (jti)' },
          delivery,
          request,
          true,
        )
      }
      try {
        return await apply(set, mapping, delivery, request)
      } catch (error) {
        // Not applied: forgotten, so the transmitter's retry (push) or the next poll applies
        // it rather than being refused as a replay. A revocation must not be lost to an outage.
        await store.forgetSsfReceived(settings.transmitter, set.jti).catch(() => {})
        throw error
      }
    } catch (error) {
      log.warn({ ...base, delivery, reason: (error as Error).message }, 'SSF SET not applied')
      count('unavailable')
      return { ok: false, err: 'unavailable', description: 'the store cannot be written now' }
    }
  }

  /** Makes the rules a recorded SET asks for and audits it; throws when the store fails. */
  async function apply(
    set: VerifiedSet,
    mapping: CaepMapping,
    delivery: 'push' | 'poll',
    request: { clientAddress?: string; requestId?: string } | undefined,
  ): Promise<ReceiveOutcome> {
    const rules: string[] = []
    let note: string | null = mapping.kind === 'revoke' ? null : mapping.note
    // The answer to our verification request (SSF 1.0 §8.1.4): the stream delivers.
    if (set.eventType === SSF_EVENT.verification && set.event.state === verificationState) {
      note = 'verification: the stream delivers'
      log.info({ ...base, delivery, stream: stream?.streamId }, 'SSF stream verified')
    }
    if (mapping.kind === 'revoke') {
      const operation = {
        store,
        clock,
        audit,
        actor: { actor, clientAddress: request?.clientAddress, requestId: request?.requestId },
      }
      for (const rule of mapping.rules) {
        try {
          const made = await revokeJwts(
            operation,
            {
              issuer: settings.jwtIssuer,
              kind: rule.kind,
              value: rule.value,
              issuedBefore: rule.issuedBefore,
              reason: `CAEP ${shortType(set.eventType)} from ${settings.name}`,
              cause: { set: set.jti, event: set.eventType },
            },
            deps.lifetime,
          )
          rules.push(made.id)
        } catch (error) {
          // An event older than every token it could refuse needs no rule.
          if (!(error instanceof OperationRefused)) throw error
          note = error.message
        }
      }
    }
    log.info({ ...base, delivery, event: shortType(set.eventType), rules }, 'SSF SET received')
    count('received')
    await write(
      {
        type: 'ssf.event_received',
        tenantId: null,
        details: { ...base, delivery, jti: set.jti, event: set.eventType, rules, note },
      },
      request,
    )
    return { ok: true, rules }
  }

  /** The `state` of our verification request: a random value, matched on the event. */
  const verificationState = randomBytes(16).toString('base64url')
  let closed = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<void> | undefined
  let stream: Stream | undefined
  // Readiness (health()): clock times of the last change of each state.
  let streamFailingSince: number | null = null
  let retrySetupMs = RETRY_SETUP_FIRST_MS
  let lastPollAt: number | null = null
  let pollingSince: number | null = null
  let pollFailingSince: number | null = null
  /** Acknowledgements and errors for the next poll: only what was applied (or refused). */
  let ack: string[] = []
  let setErrs: Record<string, { err: string; description: string }> = {}

  const later = (ms: number, run: () => Promise<void>) => {
    if (closed) return
    timer = setTimeout(() => {
      running = run().finally(() => {
        running = undefined
      })
    }, ms)
    timer.unref()
  }

  async function setup(): Promise<void> {
    try {
      const config = await client.configuration()
      const method = DELIVERY_METHOD[settings.delivery]
      if (config.deliveryMethods.length > 0 && !config.deliveryMethods.includes(method)) {
        throw new Error(`the transmitter does not offer ${settings.delivery} delivery`)
      }
      const delivery =
        settings.delivery === 'push'
          ? { method: 'push' as const, endpointUrl: settings.pushUrl ?? '' }
          : { method: 'poll' as const }
      stream = await client.stream(config, delivery, settings.streamId)
      streamFailingSince = null
      const status = await client.status(config, stream.streamId).catch(() => undefined)
      await client
        .requestVerification(config, stream.streamId, verificationState)
        .catch(() => false)
      log.info(
        { ...base, delivery: settings.delivery, stream: stream.streamId, status },
        'SSF stream ready',
      )
      retrySetupMs = RETRY_SETUP_FIRST_MS
      // Keys fetched now, so that readiness tells at once whether they can be, and the first
      // SET does not wait for them.
      await keys.warm?.()
      if (stream.pollUrl !== undefined) {
        pollingSince = clock.now()
        later(0, poll)
      }
    } catch (error) {
      streamFailingSince ??= clock.now()
      log.warn(
        { ...base, reason: (error as Error).message, retryInMs: retrySetupMs },
        'SSF stream setup failed',
      )
      later(retrySetupMs, setup)
      retrySetupMs = Math.min(retrySetupMs * 2, RETRY_SETUP_MAX_MS)
    }
  }

  async function poll(): Promise<void> {
    const url = stream?.pollUrl
    if (url === undefined) return
    let more = false
    try {
      const sent = { ack, setErrs }
      const answer = await client.poll(url, sent.ack, sent.setErrs, settings.maxEvents)
      ack = []
      setErrs = {}
      for (const [jti, token] of answer.sets) {
        if (closed) break
        const outcome = await receive(token, 'poll')
        // Acknowledged once applied (or a duplicate already applied); reported when refused;
        // neither while the store or keys are down, so the transmitter delivers it again.
        if (outcome.ok || outcome.replay) ack.push(jti)
        else if (outcome.err !== 'unavailable') {
          setErrs[jti] = { err: outcome.err, description: outcome.description }
        }
      }
      more = answer.moreAvailable || ack.length > 0 || Object.keys(setErrs).length > 0
      lastPollAt = clock.now()
      pollFailingSince = null
    } catch (error) {
      pollFailingSince ??= clock.now()
      log.warn({ ...base, reason: (error as Error).message }, 'SSF poll failed')
    }
    later(more ? 0 : settings.pollIntervalMs, poll)
  }

  function health(): ReceiverHealth {
    const now = clock.now()
    // Refreshed when due once the stream is up (setup fetched them first); not before, so
    // that probes during an outage start no key cooldown that outlasts it.
    if (stream !== undefined) void keys.warm?.()
    const iso = (ms: number) => new Date(ms).toISOString()
    const keyState = keyStatus() ?? 'unavailable'
    const keysFailingAt = keysFailingSince()
    const streamState =
      stream !== undefined ? 'ready' : streamFailingSince !== null ? 'failing' : 'starting'
    const polling = settings.delivery === 'poll'
    // A poll that has not succeeded since the stream was ready (or since the last success)
    // for this long: SETs are not arriving. The timeout counts too, as a poll may take it.
    const pollStale =
      polling &&
      pollingSince !== null &&
      now - (lastPollAt ?? pollingSince) >
        settings.pollIntervalMs * POLL_STALE_INTERVALS + settings.timeoutMs
    const keysFailing = keysFailingAt !== null && keyState !== 'fresh'
    const degraded = streamState === 'failing' || keysFailing || pollStale
    return {
      name: settings.name,
      delivery: settings.delivery,
      state: degraded ? 'degraded' : 'ok',
      stream: streamState,
      ...(streamFailingSince === null ? {} : { streamFailingSince: iso(streamFailingSince) }),
      keys: keyState,
      ...(keysFailing && keysFailingAt !== null ? { keysFailingSince: iso(keysFailingAt) } : {}),
      ...(polling ? { lastPoll: lastPollAt === null ? null : iso(lastPollAt) } : {}),
      ...(polling && pollFailingSince !== null ? { pollFailingSince: iso(pollFailingSince) } : {}),
    }
  }

  return {
    name: settings.name,
    health,
    pushAuthorization: settings.pushAuthorization,
    receive,
    async refuse(refusal, request) {
      await refused(refusal, 'push', request)
    },
    start() {
      later(0, setup)
    },
    async close() {
      closed = true
      clearTimeout(timer)
      await running
      keys.close()
    },
  }
}

/** `.../caep/event-type/session-revoked` -> `session-revoked`, for logs and reasons. */
function shortType(eventType: string): string {
  return eventType.slice(eventType.lastIndexOf('/') + 1).slice(0, 64)
}
