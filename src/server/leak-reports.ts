/**
 * `POST /leak-reports/github` on the API listener: GitHub's secret scanning partner reports
 * (auth/leak-reports.ts verifies, revokes and labels; this file only reads the request and
 * answers). Why the API listener: GitHub must reach it from the internet, and it is the one
 * listener an operator exposes; the admin listener is loopback by default and takes operator
 * credentials, the decision listener sits beside a proxy on a private network. Why outside
 * `/api/v1`: every request there carries a bearer token (SPEC §5.1); a report is
 * authenticated by GitHub's signature instead, so the gate never sees it.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { EndpointThrottle } from '../auth/address-throttle.ts'
import { type AuditSink, storeAuditSink } from '../auth/audit-events.ts'
import type { createGithubLeakReports } from '../auth/leak-reports.ts'
import type { OperationDeps } from '../auth/operations.ts'
import type { Clock } from '../core/ports.ts'
import { headerValues } from '../core/raw-headers.ts'
import {
  problemResponse,
  rateLimitedResponse,
  sendProblemResponse,
} from '../http/problem-response.ts'
import type { Store } from '../stores/store.ts'

export const LEAK_REPORT_PATH = '/leak-reports/github'

export interface LeakReportRouteOptions {
  readonly reports: ReturnType<typeof createGithubLeakReports>
  readonly store: Store
  readonly clock: Clock
  readonly maxBodyBytes: number
  /**
   * The failed-auth limit: a refused report counts against the client address, and an
   * address over the limit gets 429 before its body is read or any signature checked.
   */
  readonly throttle?: EndpointThrottle | undefined
}

/** The audit actor of revocations a report makes. */
const ACTOR = 'github:secret-scanning'

export function leakReportRoutes(options: LeakReportRouteOptions) {
  const { reports, store, clock, throttle } = options
  const audit: AuditSink = storeAuditSink(store, () => clock.now())
  const depsOf = (request: FastifyRequest): OperationDeps => ({
    store,
    clock,
    audit,
    actor: { actor: ACTOR, clientAddress: request.ip, requestId: String(request.id) },
  })
  return async (app: FastifyInstance): Promise<void> => {
    await app.register(async (scope) => {
      // The raw bytes are what GitHub signed: no parser may touch them first.
      scope.removeAllContentTypeParsers()
      scope.addContentTypeParser(
        'application/json',
        { parseAs: 'buffer', bodyLimit: options.maxBodyBytes },
        (_request, body, done) => done(null, body),
      )
      if (throttle) {
        scope.addHook('onRequest', async (request, reply) => {
          const state = await throttle.check(request.ip, String(request.id))
          if (state !== undefined) {
            return sendProblemResponse(reply, rateLimitedResponse(state, String(request.id)))
          }
        })
      }
      scope.post(LEAK_REPORT_PATH, { bodyLimit: options.maxBodyBytes }, async (request, reply) => {
        const answer = await reports.handle(depsOf(request), {
          keyIds: headerValues(request.raw.rawHeaders, 'github-public-key-identifier'),
          signatures: headerValues(request.raw.rawHeaders, 'github-public-key-signature'),
          body: Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0),
        })
        if (!answer.ok) {
          await throttle?.failed(request.ip)
          request.log.warn({ code: answer.code }, 'leak report refused')
          return sendProblemResponse(
            reply,
            problemResponse(answer.code, answer.detail, String(request.id), {
              status: answer.status,
            }),
          )
        }
        request.log.info(
          {
            matches: answer.body.length,
            ours: answer.body.filter((l) => l.label === 'true_positive').length,
          },
          answer.replayed
            ? 'leak report: a replay, answered from memory'
            : 'leak report: reported PATs revoked',
        )
        return reply.type('application/json; charset=utf-8').send(answer.body)
      })
    })
  }
}
