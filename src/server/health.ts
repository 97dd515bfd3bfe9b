import type { FastifyInstance } from 'fastify'
import { sendProblemResponse } from '../adapters/fastify.ts'
import type { AuthContext } from '../auth/auth-context.ts'
import type { JwksStatus } from '../core/jwks.ts'
import { storeUnavailable } from '../http/problem-response.ts'

/**
 * Liveness and readiness, outside `/api/v1` and without a token: orchestrators call them.
 *
 * `/readyz` is 503 only when the store is unreachable: then no PAT, tenant or revocation can
 * be checked and another instance may do better. An identity provider whose keys are not
 * loaded does *not* make the instance unready. Why: every instance depends on the same
 * provider, so taking this one out of rotation fixes nothing; it would only stop the PATs
 * and the other issuers' tokens it can still serve, and a load balancer seeing all instances
 * unready at once would drop all traffic. Such issuers are listed instead (200, `status:
 * "degraded"`), and their tokens get 503 `unavailable` with `Retry-After` until keys load.
 * The listing shows issuer identifiers only (public values: they appear in every token),
 * never URLs' contents, errors or keys. Each call also starts a background key refresh of
 * due sources, so a probe keeps keys fresh on a quiet instance.
 */
export function registerHealthRoutes(app: FastifyInstance, auth: AuthContext): void {
  app.get('/healthz', async () => ({ status: 'ok' }))
  app.get('/readyz', async (request, reply) => {
    try {
      await auth.store.ping()
    } catch {
      return sendProblemResponse(reply, storeUnavailable(String(request.id)))
    }
    const issuers = {
      ...issuerReadiness(auth.issuers.keyStatus()),
      invalid: auth.issuers.unusable(),
    }
    const degraded =
      issuers.notLoaded.length > 0 || issuers.stale.length > 0 || issuers.invalid.length > 0
    return { status: degraded ? 'degraded' : 'ready', checks: { store: 'ok', issuers } }
  })
}

/** Issuers grouped by key state; `notLoaded` ones answer 503 for now, `stale` ones verify. */
export function issuerReadiness(statuses: readonly JwksStatus[]) {
  const issuersWhere = (test: (s: JwksStatus) => boolean) =>
    statuses.filter(test).map((s) => s.issuer)
  return {
    remote: statuses.length,
    notLoaded: issuersWhere((s) => s.state === 'unavailable'),
    // Past max age only because refreshing fails (not merely due on a quiet instance).
    stale: issuersWhere((s) => s.state === 'stale' && s.failingSince !== null),
  }
}
