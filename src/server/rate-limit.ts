import { createHash } from 'node:crypto'
import fastifyRateLimit, { type CreateRateLimitOptions, normalizeIP } from '@fastify/rate-limit'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { Redis } from 'ioredis'
import type { Config } from '../config/schema.ts'
import type { Principal } from '../core/principal.ts'
import { PROBLEM_CONTENT_TYPE, problem } from '../http/problem.ts'
import { mostConstraining, type PolicyState, rateLimitHeaders } from './limits-headers.ts'
import { credentialDigest, KnownCredentials } from './limits-known-tokens.ts'
import { FallbackStore } from './limits-store.ts'

export type RateLimitConfig = Config['rateLimit']

export interface RateLimitPluginOptions {
  readonly config: Readonly<RateLimitConfig>
  /** Shared counters across instances; omitted: in-process counters. */
  readonly redisUrl?: string | undefined
  /** Requests whose path starts with this are limited. Default `/api/v1/`. */
  readonly prefix?: string
}

type PolicyName = 'per-token' | 'per-tenant' | 'failed-auth'

/** One policy bound to @fastify/rate-limit's counting (`createRateLimit`). */
interface Limiter {
  readonly name: PolicyName
  readonly quota: number
  readonly windowSec: number
  /** Counts a hit (`increment: false`: only reads) and returns the policy's state. */
  check(request: FastifyRequest, increment?: boolean): Promise<Checked>
}

interface Checked {
  readonly state: PolicyState
  /** More hits than the quota in this window (this request is over the limit). */
  readonly exceeded: boolean
  /** Exactly the quota: this request was the last one allowed. */
  readonly atLimit: boolean
}

/** IPv6 clients are grouped per /64, the block one subscriber usually controls. */
const IPV6_SUBNET = 64
/** Credentials that authenticated within this long may try again from a throttled address. */
const KNOWN_CREDENTIAL_MAX_AGE_MS = 3_600_000
const KNOWN_CREDENTIAL_MAX_ENTRIES = 50_000
const LIMITED = Symbol('tokengate.rateLimited')
const DIGEST = Symbol('tokengate.credentialDigest')

declare module 'fastify' {
  interface FastifyRequest {
    [LIMITED]?: boolean
    [DIGEST]?: string
  }
}

/**
 * Rate limits on the protected prefix, counted by @fastify/rate-limit (its fixed-window
 * stores, Redis when `redisUrl` is set) and answered as problem+json 429 with `Retry-After`
 * and one `RateLimit-Policy`/`RateLimit` pair. Register it *before* the auth plugin:
 *
 * 1. `onRequest` (before authentication): an address over its failed-authentication limit
 *    gets 429 without any verification, unless it presents a credential this instance
 *    verified recently (`KnownCredentials`);
 * 2. `preParsing` (after every `onRequest` hook, so after authentication, and before the
 *    body is read): per-token, then per-tenant;
 * 3. `onSend`: every 401 counts one failure against the client address.
 *
 * Where this goes around the library: it calls `fastify.createRateLimit()` and builds the
 * response itself, because the library's hooks emit the older `RateLimit-Limit/-Remaining/
 * -Reset` fields, one set per limiter, and throw an error instead of answering.
 *
 * @example
 * await app.register(rateLimitPlugin, { config: config.rateLimit, redisUrl: config.redisUrl })
 * await app.register(tokengatePlugin, { authenticate })
 */
const plugin: FastifyPluginAsync<RateLimitPluginOptions> = async (fastify, options) => {
  const { config } = options
  if (!config.enabled) return
  const prefix = options.prefix ?? '/api/v1/'
  const exact = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix
  const underPrefix = (url: string) => url.startsWith(prefix) || pathOf(url) === exact

  const redis = options.redisUrl
    ? await connectRedis(options.redisUrl, config.redisTimeoutMs, fastify.log)
    : undefined
  if (redis) fastify.addHook('onClose', async () => redis.disconnect())
  const root = new FallbackStore({
    redis,
    redisPrefix: config.redisPrefix,
    localMaxKeys: config.localMaxKeys,
    log: fastify.log,
  })
  await fastify.register(fastifyRateLimit, {
    global: false,
    // The library calls `new store(params)`; every policy then gets `root.child(...)`.
    store: function RootStore() {
      return root
    } as unknown as CreateRateLimitOptions['store'],
  })

  const limiter = (
    name: PolicyName,
    settings: { max: number; windowSec: number },
    keyGenerator: (request: FastifyRequest) => string,
  ): Limiter | undefined => {
    if (settings.max === 0) return undefined
    const count = fastify.createRateLimit({
      max: settings.max,
      timeWindow: settings.windowSec * 1000,
      keyGenerator,
      policy: name,
    } as CreateRateLimitOptions)
    return {
      name,
      quota: settings.max,
      windowSec: settings.windowSec,
      async check(request, increment = true) {
        const result = await count(request, { increment })
        if (result.isAllowed) throw new Error('rate limit allowList is not used')
        const state = {
          name,
          quota: settings.max,
          windowSec: settings.windowSec,
          remaining: result.remaining,
          resetSec: result.ttl > 0 ? Math.max(1, result.ttlInSeconds) : settings.windowSec,
        }
        return {
          state,
          exceeded: result.isExceeded,
          atLimit: result.remaining === 0 && !result.isExceeded,
        }
      },
    }
  }

  const perToken = limiter('per-token', config.perToken, (r) => tokenKey(r.principal))
  const perTenant = limiter('per-tenant', config.perTenant, (r) => r.principal?.tenantId ?? '')
  const failedAuth = limiter('failed-auth', config.failedAuth, (r) =>
    normalizeIP(r.ip, IPV6_SUBNET),
  )
  const known = new KnownCredentials(KNOWN_CREDENTIAL_MAX_ENTRIES, KNOWN_CREDENTIAL_MAX_AGE_MS)

  if (failedAuth) {
    fastify.addHook('onRequest', async (request, reply) => {
      if (!underPrefix(request.url)) return
      // A credential verified recently on this instance may always try, so it skips the
      // counter read (one Redis round trip saved for returning clients). Why: an attacker
      // sharing a NAT or proxy with a legitimate token holder must not lock that holder
      // out. The key is the address, so other addresses never notice an attack either.
      const digest = digestOf(request)
      if (digest && known.has(digest, Date.now())) return
      const { state } = await failedAuth.check(request, false)
      if (state.remaining > 0) return
      // Over the limit: refused before verification. Why not verify and answer 429 only on
      // failure: the limit exists to stop paying for signature checks, store lookups and
      // audit writes on behalf of a guessing client.
      return sendRateLimited(request, reply, state)
    })
    fastify.addHook('onSend', async (request, reply, payload) => {
      if (reply.statusCode !== 401 || !request.authFailure) return payload
      // A credential that stopped working (revoked, expired) loses its pass at once.
      const digest = digestOf(request)
      if (digest) known.forget(digest)
      const { state, atLimit } = await failedAuth.check(request)
      if (atLimit) {
        request.log.warn(
          { clientAddress: request.ip, policy: state.name, windowSec: state.windowSec },
          'failed-authentication limit reached; unverified attempts from this address get 429',
        )
      }
      reply.headers(rateLimitHeaders(state))
      return payload
    })
  }

  if (perToken || perTenant || failedAuth) {
    const limitPrincipal = async (request: FastifyRequest, reply: FastifyReply) => {
      if (!request.principal || request[LIMITED]) return
      request[LIMITED] = true
      const digest = failedAuth && digestOf(request)
      if (digest) known.remember(digest, Date.now())
      // Token first, and the tenant counted only when the token is within its limit: one
      // runaway token must not spend its tenant's allowance and starve the other tokens.
      const token = perToken ? await perToken.check(request) : undefined
      if (token?.exceeded) return sendRateLimited(request, reply, token.state)
      const tenant = perTenant ? await perTenant.check(request) : undefined
      if (tenant?.exceeded) return sendRateLimited(request, reply, tenant.state)
      const shown = token ? mostConstraining(token.state, tenant?.state) : tenant?.state
      if (shown) reply.headers(rateLimitHeaders(shown))
    }
    fastify.addHook('preParsing', async (request, reply, payload) => {
      await limitPrincipal(request, reply)
      return payload
    })
    // Defence in depth, like the auth plugin's own preHandler: a request authenticated only
    // there (a URL the prefix test missed) is limited too. Route-level hooks run after the
    // auth plugin's global preHandler, so the principal is known by then.
    fastify.addHook('onRoute', (route) => {
      if (!route.url.startsWith(exact)) return
      const hooks = route.preHandler
      const own = (request: FastifyRequest, reply: FastifyReply) => limitPrincipal(request, reply)
      route.preHandler = hooks ? [...(Array.isArray(hooks) ? hooks : [hooks]), own] : [own]
    })
  }
}

/**
 * The per-token key. Never the token itself: a PAT by its id; a JWT by a digest of issuer,
 * tenant and subject, so a client that refreshes its short-lived JWT keeps one allowance
 * (its `jti` changes every time) and Redis holds no subject identifiers in clear text.
 */
function tokenKey(principal: Principal | null): string {
  if (!principal) return ''
  if (principal.tokenType === 'pat') return `pat:${principal.tokenId ?? principal.fingerprint}`
  const identity = `${principal.issuer ?? ''}\n${principal.tenantId}\n${principal.subject}`
  return `jwt:${createHash('sha256').update(identity, 'utf8').digest('base64url').slice(0, 27)}`
}

/** The request's credential digest, computed at most once per request. */
function digestOf(request: FastifyRequest): string | undefined {
  if (request[DIGEST] !== undefined) return request[DIGEST]
  const authorization = request.headers.authorization
  if (!authorization) return undefined
  request[DIGEST] = credentialDigest(authorization)
  return request[DIGEST]
}

function sendRateLimited(request: FastifyRequest, reply: FastifyReply, state: PolicyState) {
  const detail =
    state.name === 'failed-auth'
      ? `Too many failed authentications from this address; retry in ${state.resetSec} s.`
      : `Rate limit "${state.name}" exceeded (${state.quota} requests per ${state.windowSec} s); retry in ${state.resetSec} s.`
  return reply
    .code(429)
    .headers({
      ...rateLimitHeaders(state),
      'retry-after': String(state.resetSec),
      'cache-control': 'no-store',
    })
    .type(PROBLEM_CONTENT_TYPE)
    .send(
      problem(429, 'rate_limited', detail, String(request.id), {
        policy: state.name,
      }),
    )
}

/**
 * A client that fails fast: no offline queue, no retries of a command, a command timeout,
 * so a Redis outage costs a request at most `timeoutMs` before it is counted in-process.
 * It reconnects on its own with backoff. Start-up does not wait past one connect attempt.
 */
async function connectRedis(
  url: string,
  timeoutMs: number,
  log: { warn(obj: object, msg: string): void },
): Promise<Redis> {
  const redis = new Redis(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: timeoutMs,
    connectTimeout: Math.max(1000, timeoutMs * 4),
    enableAutoPipelining: true,
    retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
  })
  // Connection errors are reported through the store's health (one warning per outage);
  // without a listener ioredis would print each reconnect failure itself.
  redis.on('error', () => {})
  try {
    await redis.connect()
  } catch (error) {
    log.warn({ err: error }, 'rate-limit counters: Redis not reachable at start-up; retrying')
  }
  return redis
}

function pathOf(url: string): string {
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}

export const rateLimitPlugin = fp(plugin, { fastify: '5.x', name: 'tokengate-rate-limit' })
export default rateLimitPlugin
