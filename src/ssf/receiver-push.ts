/**
 * `POST /ssf/events/<receiver>` on the API listener: SETs pushed by CAEP/SSF transmitters
 * (RFC 8935). Why outside `/api/v1`: every request there carries a caller's bearer token
 * (SPEC §5.1); a push is authenticated by the SET's signature (and, when the transmitter is
 * given one, its `Authorization` value), so the gate never sees it. Answers per RFC 8935
 * §2.3/§2.4: 202 on success, 400 with `{ err, description }` for a bad SET. Every refusal
 * counts against the client address under the failed-authentication limit; an address over
 * it is answered 429 with `Retry-After` before its body is read, and audited once per window
 * (auth/address-throttle.ts), so garbage cannot buy an audit row per request.
 */
import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { EndpointThrottle } from '../auth/address-throttle.ts'
import { rateLimitHeaders } from '../http/rate-limit-headers.ts'
import { SET_MEDIA_TYPE } from './events.ts'
import type { SsfReceiver } from './receiver.ts'
import type { SetRefusal } from './set-verify.ts'

export const SSF_PUSH_PATH = '/ssf/events/:receiver'

/** A SET is a few hundred bytes; anything near this is not one. */
export const DEFAULT_MAX_PUSH_BYTES = 64 * 1024

export function ssfPushRoutes(
  receivers: readonly SsfReceiver[],
  maxBodyBytes: number = DEFAULT_MAX_PUSH_BYTES,
  throttle?: EndpointThrottle,
) {
  const byName = new Map(receivers.map((r) => [r.name, r]))
  const receiverOf = (request: FastifyRequest) =>
    byName.get((request.params as { receiver?: string }).receiver ?? '')
  /** Counts a refusal against the address (not a 503: that is not the sender's doing). */
  const failed = (request: FastifyRequest) => throttle?.failed(request.ip)
  return async (app: FastifyInstance): Promise<void> => {
    await app.register(async (scope) => {
      // Before the body is read: a throttled address costs a counter read, nothing more. The
      // transmitter's own `Authorization` (when it has one) passes anyway, so an attacker
      // behind the same address cannot hold its SETs back.
      scope.addHook('onRequest', async (request, reply) => {
        if (throttle === undefined) return
        const expected = receiverOf(request)?.pushAuthorization
        const sent = request.headers.authorization
        if (expected !== undefined && typeof sent === 'string' && sameSecret(sent, expected)) {
          return
        }
        const state = await throttle.check(request.ip, String(request.id))
        if (state === undefined) return
        return reply
          .code(429)
          .headers({ ...rateLimitHeaders(state), 'retry-after': String(state.resetSec) })
          .type('application/json')
          .send({
            err: 'rate_limited',
            description: `too many refused requests from this address; retry in ${state.resetSec} s`,
          })
      })
      // The SET is read as bytes, whatever the media type claims: checked in the handler,
      // so a wrong one gets the RFC 8935 answer instead of Fastify's 415.
      scope.removeAllContentTypeParsers()
      scope.addContentTypeParser(
        '*',
        { parseAs: 'buffer', bodyLimit: maxBodyBytes },
        (_request, body, done) => done(null, body),
      )
      scope.setErrorHandler(async (error, request, reply) => {
        const receiver = receiverOf(request)
        const tooLarge = (error as { code?: string }).code === 'FST_ERR_CTP_BODY_TOO_LARGE'
        const refusal: SetRefusal = {
          ok: false,
          err: 'invalid_request',
          description: tooLarge
            ? `the SET is larger than ${maxBodyBytes} bytes`
            : 'the request could not be read',
        }
        await failed(request)
        await receiver?.refuse(refusal, requestOf(request))
        return answer(reply, tooLarge ? 413 : 400, refusal)
      })
      scope.post(SSF_PUSH_PATH, { bodyLimit: maxBodyBytes }, async (request, reply) => {
        const receiver = byName.get((request.params as { receiver: string }).receiver)
        if (receiver === undefined) {
          await failed(request)
          return reply.code(404).type('application/json').send({
            err: 'invalid_request',
            description: 'no such SSF receiver',
          })
        }
        const by = requestOf(request)
        // Why a digest compare: the expected value is a secret; comparing digests of equal
        // length in constant time tells nothing of how much of a guess was right.
        if (receiver.pushAuthorization !== undefined) {
          const sent = request.headers.authorization
          if (typeof sent !== 'string' || !sameSecret(sent, receiver.pushAuthorization)) {
            const refusal: SetRefusal = {
              ok: false,
              err: 'authentication_failed',
              description: 'the Authorization header is missing or wrong',
            }
            await failed(request)
            await receiver.refuse(refusal, by)
            return answer(reply, 401, refusal)
          }
        }
        const type = String(request.headers['content-type'] ?? '')
          .split(';')[0]
          ?.trim()
          .toLowerCase()
        if (type !== SET_MEDIA_TYPE || !Buffer.isBuffer(request.body)) {
          const refusal: SetRefusal = {
            ok: false,
            err: 'invalid_request',
            description: `the body must be ${SET_MEDIA_TYPE}`,
          }
          await failed(request)
          await receiver.refuse(refusal, by)
          return answer(reply, 400, refusal)
        }
        const outcome = await receiver.receive(request.body.toString('latin1').trim(), 'push', by)
        if (outcome.ok) return reply.code(202).send()
        if (outcome.err === 'unavailable') {
          // The SET is not known bad: its keys (or the store) cannot be had now. 503 makes
          // the transmitter retry (RFC 8935 §2.4 allows an HTTP error); the body names the
          // RFC 8935 reason.
          return reply
            .code(503)
            .header('retry-after', '5')
            .type('application/json')
            .send({ err: 'invalid_key', description: outcome.description })
        }
        await failed(request)
        return answer(reply, 400, outcome)
      })
    })
  }
}

function answer(reply: FastifyReply, status: number, refusal: SetRefusal) {
  return reply
    .code(status)
    .type('application/json')
    .send({ err: refusal.err, description: refusal.description })
}

function requestOf(request: FastifyRequest) {
  return { clientAddress: request.ip, requestId: String(request.id) }
}

function sameSecret(sent: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest()
  return timingSafeEqual(digest(sent), digest(expected))
}
