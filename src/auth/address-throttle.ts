/**
 * The failed-authentication limit (`rateLimit.failedAuth`, limiter.ts) for the endpoints a
 * signature authenticates instead of a caller's credential: CAEP/SSF push
 * (`/ssf/events/<name>`) and GitHub leak reports (`/leak-reports/github`). Why: anyone who
 * can reach them can make tokengate verify signatures and write an audit row per refusal; an
 * address over the limit is answered 429 before anything is read or verified, and its
 * refusals are audited once per window with a count (`auth.throttled`, as the API's are).
 * Counted in the process's one limiter, so an address's failures add up whichever endpoint
 * or listener they reached.
 */
import type { LimitState } from '../core/failure.ts'
import { type AuditSink, auditRecord } from './audit-events.ts'
import { createRefusalRecorder } from './failed-auth-refusals.ts'
import { addressKeyOf, type Limiter, type LimitVerdict } from './limiter.ts'

export interface EndpointThrottle {
  /**
   * The limit's state when the address is over it (answer 429 with `Retry-After`), counted
   * in this endpoint's `auth.throttled` aggregate; undefined: go on.
   */
  check(clientAddress: string, requestId: string): Promise<LimitState | undefined>
  /** Counts one refused request against the address. */
  failed(clientAddress: string): Promise<void>
}

export interface AddressThrottle {
  /** The throttle of one endpoint (`path` names it in the audit). */
  endpoint(path: string): EndpointThrottle
  /** Writes the pending `auth.throttled` aggregates (shutdown). */
  close(): void
}

export function createAddressThrottle(
  limiter: Limiter | undefined,
  deps: {
    readonly audit: AuditSink
    readonly windowSec: number
    readonly log: { warn(fields: object, message: string): void }
    readonly now: () => number
  },
): AddressThrottle {
  const recorders: { close(): void }[] = []
  const verdict = (run: (done: (error: Error | null, v?: LimitVerdict) => void) => void) =>
    new Promise<LimitVerdict>((resolve) =>
      run((error, v) => {
        // The counter store falls back to in-process counts while Redis is down; an error
        // left here is not the caller's doing, so the request is judged on its own merits.
        if (error || v === undefined) {
          deps.log.warn({ reason: error?.message }, 'failed-auth limit not checked')
          return resolve({ refused: false })
        }
        resolve(v)
      }),
    )
  return {
    endpoint(path) {
      const refusals = createRefusalRecorder({
        windowSec: deps.windowSec,
        now: deps.now,
        write: (event) =>
          deps.audit.write(
            auditRecord(
              {
                type: 'auth.throttled',
                tenantId: null,
                outcome: 'rate_limited',
                details: { refused: event.refused, windowSec: event.windowSec, path },
              },
              { actor: null, clientAddress: event.clientAddress, requestId: event.requestId },
              deps.now(),
            ),
          ),
      })
      recorders.push(refusals)
      return {
        async check(clientAddress, requestId) {
          if (!limiter?.gatesFailures) return undefined
          const v = await verdict((done) =>
            limiter.gate(addressKeyOf(clientAddress), undefined, done),
          )
          if (!v.refused) return undefined
          refusals.record(clientAddress, requestId)
          return v.state
        },
        async failed(clientAddress) {
          if (!limiter?.gatesFailures) return
          const v = await verdict((done) =>
            limiter.countFailure(addressKeyOf(clientAddress), undefined, done),
          )
          if (v.refused) {
            deps.log.warn(
              { clientAddress, path, windowSec: deps.windowSec },
              'failed-authentication limit reached; requests from this address get 429',
            )
          }
        },
      }
    },
    close() {
      for (const recorder of recorders) recorder.close()
    },
  }
}
