import type { FastifyInstance } from 'fastify'
import type { AuthContext } from '../auth/auth-context.ts'
import type { RedisState } from '../auth/counter-store.ts'
import { issuerReadiness } from '../auth/issuer-registry.ts'
import { sendProblemResponse, storeUnavailable } from '../http/problem-response.ts'

/** A CAEP/SSF receiver as `/readyz` lists it (ssf/receiver.ts `health()` makes it). */
export interface SsfReceiverReadiness {
  readonly name: string
  readonly state: 'ok' | 'degraded'
}

/**
 * Liveness and readiness, outside `/api/v1` and without a token: orchestrators call them.
 *
 * `/readyz` is 503 ("not ready") only when the store is unreachable: then no PAT, tenant or
 * revocation can be checked and another instance may do better. Everything else that can go
 * wrong leaves the instance answering every request correctly, with a weaker guarantee, and
 * is reported as 200 `status: "degraded"` with the check that failed:
 * - `changeFeed: "reconnecting"` (Postgres): changes made on other instances are not pushed
 *   here; this instance dropped its caches and reads the store until it re-subscribes;
 * - `redis: "unavailable"`: rate limits are counted in-process, per instance;
 * - issuers whose keys are not loaded (`notLoaded`: their tokens get 503 `unavailable` with
 *   `Retry-After`), past their maximum age because refreshing fails (`stale`), or refused
 *   (`invalid`), and keys an issuer publishes that cannot be used (`skippedKeys`: issuer,
 *   `kid` and reason; their tokens get 401);
 * - `storeWrites: "failing"`: writes fail or the data directory is full (stores/write-health.ts;
 *   `storeWritesFailing` names which: `appendAudit`, `addUsage`, `recordPatUse`, `disk`).
 *   Requests are still decided (reads work, revocations use the disk reserve); audit events
 *   and usage counts wait in the spool and in memory until space returns;
 * - issuers whose sealed secret this instance cannot open (`unreadable`: no or another
 *   `secretKeyFile`; their tokens get 503), and a failed re-read of the issuer set
 *   (`reloadFailing`: the previous set is in force, retried every second);
 * - `jwtRevocations: "stale"` with `jwtRevocationsStaleSince` (ISO time): the JWT revocation
 *   rules cannot be read; the rules read before stay in force (a revoked JWT stays refused),
 *   but a rule made meanwhile elsewhere is not yet; a whole read is retried every second.
 * - `ssf` (with `ssf.receivers` only): each CAEP/SSF receiver, `state: "degraded"` when its
 *   stream cannot be set up (`stream: "failing"`, `streamFailingSince`), its transmitter's
 *   keys cannot be fetched (`keysFailingSince`), or, polling, no poll succeeded for 10
 *   intervals plus the request timeout (`lastPoll`, `pollFailingSince`): revocations from
 *   that identity provider are not arriving, every other request is answered as before.
 * Why these do *not* make the instance unready: every instance shares the same Postgres,
 * Redis and identity providers, so taking this one out of rotation fixes nothing; a load
 * balancer seeing all instances unready at once would drop all traffic. The listing shows
 * issuer identifiers and key ids only (public values: they appear in every token), never
 * URLs' contents, errors or key material. Each call also starts a background key refresh of due sources, so a probe
 * keeps keys fresh on a quiet instance. `changeFeed` is listed with Postgres only, `redis`
 * with `redisUrl` only. docs/scale-out.md has the table.
 */
export function registerHealthRoutes(
  app: FastifyInstance,
  auth: AuthContext,
  redisState: () => RedisState = () => undefined,
  ssf?: () => readonly SsfReceiverReadiness[],
): void {
  app.get('/healthz', async () => ({ status: 'ok' }))
  app.get('/readyz', async (request, reply) => {
    const feed = auth.store.changeFeed
    const staleSince = auth.jwtRevocationsStaleSince()
    const shared = {
      ...(feed ? { changeFeed: feed.connected ? 'connected' : 'reconnecting' } : {}),
      ...(redisState() ? { redis: redisState() } : {}),
      ...(staleSince === null
        ? { jwtRevocations: 'ok' }
        : {
            jwtRevocations: 'stale',
            jwtRevocationsStaleSince: new Date(staleSince).toISOString(),
          }),
    }
    try {
      await auth.store.ping()
    } catch {
      const response = storeUnavailable(String(request.id))
      const checks = { store: 'unavailable', ...shared }
      return sendProblemResponse(reply, { ...response, body: { ...response.body, checks } })
    }
    const { view: issuers, degraded: issuersDegraded } = issuerReadiness(auth.issuers)
    const receivers = ssf?.()
    const writes = auth.writes.state()
    const storeWrites = writes.failing
      ? { storeWrites: 'failing', storeWritesFailing: writes.areas }
      : { storeWrites: 'ok' }
    const degraded =
      issuersDegraded ||
      writes.failing ||
      shared.changeFeed === 'reconnecting' ||
      shared.redis === 'unavailable' ||
      staleSince !== null ||
      receivers?.some((r) => r.state === 'degraded') === true
    return {
      status: degraded ? 'degraded' : 'ready',
      checks: {
        store: 'ok',
        ...storeWrites,
        ...shared,
        issuers,
        ...(receivers === undefined ? {} : { ssf: receivers }),
      },
    }
  })
}
