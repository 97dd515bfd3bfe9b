import { normalizeIP } from '@fastify/rate-limit'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { openCounterStore } from '../auth/counter-store.ts'
import {
  createLimiter,
  credentialDigest,
  type Limiter,
  type RateLimitConfig,
} from '../auth/limiter.ts'
import { rateLimitedResponse } from '../http/problem-response.ts'
import { type PolicyState, rateLimitHeaders } from '../http/rate-limit-headers.ts'
import { COUNT_FAILURE, GATE_FAILED_AUTH, LIMIT_PRINCIPAL } from './plugin.ts'
import { stateOf, tokenDigestOf } from './request-state.ts'
import { sendResponse } from './send-response.ts'

export type { RateLimitConfig }

export interface RateLimitPluginOptions {
  readonly config: Readonly<RateLimitConfig>
  /** Shared counters across instances; omitted: in-process counters. Unused with `limiter`. */
  readonly redisUrl?: string | undefined
  /** The limiter (auth/limiter.ts); omitted: one is built from `config` and `redisUrl`. */
  readonly limiter?: Limiter
  /** Called for each request the failed-authentication limit refuses (audit aggregation). */
  readonly onRefused?: (request: FastifyRequest) => void
}

type Done = (error?: Error) => void

/** IPv6 clients are grouped per /64, the block one subscriber usually controls. */
const IPV6_SUBNET = 64

/**
 * The limiter (auth/limiter.ts) on the auth plugin's requests, answered as problem+json 429 with
 * `Retry-After` and one `RateLimit-Policy`/`RateLimit` pair (http/). Register it *before*
 * the auth plugin:
 *
 * 1. before every authentication (the auth plugin calls the gate): an address over its
 *    failed-authentication limit gets 429 without any verification, unless it presents a
 *    credential this instance verified recently;
 * 2. right after authentication (the auth plugin calls it, in `onRequest` before the body is
 *    read, or in `preHandler` for a URL only routing matched): per-token, then per-tenant;
 * 3. before the auth plugin answers a 401: one failure counted against the client address.
 *
 * Callback-style throughout: with the in-process store a request goes through all of them
 * without a single promise; with Redis they continue when the reply arrives.
 *
 * @example
 * await app.register(rateLimitPlugin, { config: config.rateLimit, redisUrl: config.redisUrl })
 * await app.register(tokengatePlugin, { authenticate })
 */
const plugin: FastifyPluginAsync<RateLimitPluginOptions> = async (fastify, options) => {
  const { config } = options
  if (!config.enabled) return

  let limiter = options.limiter
  if (!limiter) {
    const counters = await openCounterStore({
      redisUrl: options.redisUrl,
      redisPrefix: config.redisPrefix,
      redisTimeoutMs: config.redisTimeoutMs,
      localMaxKeys: config.localMaxKeys,
      log: fastify.log,
    })
    if (options.redisUrl) fastify.addHook('onClose', async () => counters.close())
    limiter = createLimiter(config, counters.store)
  }
  const limits = limiter

  if (limits.gatesFailures) {
    // Called by the auth plugin before *every* call of authenticate, whatever hook or URL
    // spelling led there (`/api/v%31/me`, absolute-form targets, routes matched only after
    // decoding): a gate in front of a path-prefix test is skipped by any spelling the test
    // does not know, and each such request then paid full verification and an audit row.
    const gate = (request: FastifyRequest, reply: FastifyReply, next: Done) =>
      limits.gate(addressKeyOf(request), digestOf(request), (error, verdict) => {
        if (error || !verdict) return next(error ?? undefined)
        if (!verdict.refused) return next()
        // Answering, it does not call `next`.
        options.onRefused?.(request)
        sendRateLimited(request, reply, verdict.state)
      })
    fastify.decorate(GATE_FAILED_AUTH, gate)
    // Called by the auth plugin before it answers a 401 (the response is not sent yet).
    const countFailure = (request: FastifyRequest, reply: FastifyReply, done: Done) =>
      limits.countFailure(addressKeyOf(request), digestOf(request), (error, verdict) => {
        if (error || !verdict?.state) return done(error ?? new Error('rate-limit store: no result'))
        const { state } = verdict
        if (verdict.refused) {
          request.log.warn(
            { clientAddress: request.ip, policy: state.name, windowSec: state.windowSec },
            'failed-authentication limit reached; unverified attempts from this address get 429',
          )
        }
        reply.headers(rateLimitHeaders(state))
        done()
      })
    fastify.decorate(COUNT_FAILURE, countFailure)
  }

  if (limits.active) {
    /** Calls `done` to continue, or answers 429 and does not. */
    const limitPrincipal = (request: FastifyRequest, reply: FastifyReply, done: Done) => {
      const principal = request.principal
      if (!principal) return done()
      const digest = limits.gatesFailures ? digestOf(request) : undefined
      limits.limitPrincipal(principal, digest, (error, verdict) => {
        if (error || !verdict) return done(error ?? undefined)
        if (verdict.refused) return void sendRateLimited(request, reply, verdict.state)
        if (verdict.state) reply.headers(rateLimitHeaders(verdict.state))
        done()
      })
    }
    // Not a hook of its own: the auth plugin calls it right after each successful
    // authentication (at most one per request), sparing every request a hook step.
    fastify.decorate(LIMIT_PRINCIPAL, limitPrincipal)
  }
}

/**
 * The failed-authentication key of the request's address, computed once per request (a 401
 * reads and then counts it). IPv6 addresses are grouped per /64 by the library's
 * `normalizeIP`; an IPv4 address (no `:`) is its own key, which spares the library's IPv6
 * test, a large regular expression, on every request of a 401 flood.
 */
function addressKeyOf(request: FastifyRequest): string {
  const state = stateOf(request)
  let key = state.addressKey
  if (key === undefined) {
    const ip = request.ip
    key = ip.includes(':') ? normalizeIP(ip, IPV6_SUBNET) : ip
    state.addressKey = key
  }
  return key
}

/**
 * The request's credential digest, computed at most once per request. For a `Bearer <token>`
 * value it is the token's SHA-256 (hex, request-state.ts), which authentication then reuses
 * as a PAT's store key or a JWT's cache key instead of hashing the token again; any other
 * value gets `credentialDigest` (base64url, so the two kinds of key never collide).
 */
function digestOf(request: FastifyRequest): string | undefined {
  const state = stateOf(request)
  if (state.credentialDigest !== undefined) return state.credentialDigest
  const authorization = request.headers.authorization
  if (!authorization) return undefined
  state.credentialDigest = tokenDigestOf(request)?.sha256Hex ?? credentialDigest(authorization)
  return state.credentialDigest
}

function sendRateLimited(request: FastifyRequest, reply: FastifyReply, state: PolicyState) {
  stateOf(request).refusedBy = state.name
  return sendResponse(reply, rateLimitedResponse(state, String(request.id)))
}

export const rateLimitPlugin = fp(plugin, { fastify: '5.x', name: 'tokengate-rate-limit' })
export default rateLimitPlugin
