import { hash } from 'node:crypto'
import { normalizeIP } from '@fastify/rate-limit'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Redis } from 'ioredis'
import type { Config } from '../config/schema.ts'
import type { Principal } from '../core/principal.ts'
import { API_PREFIX } from '../http/api-path.ts'
import { rateLimitedResponse } from '../http/problem-response.ts'
import { mostConstraining, type PolicyState, rateLimitHeaders } from '../http/rate-limit-headers.ts'
import { credentialDigest, KnownCredentials } from './limits-known-tokens.ts'
import { type CounterResult, FallbackStore } from './limits-store.ts'
import { GATE_FAILED_AUTH, LIMIT_PRINCIPAL } from './plugin.ts'
import { sendResponse } from './send-response.ts'
import { tokenDigestOf } from './token-digest.ts'

export type RateLimitConfig = Config['rateLimit']

export interface RateLimitPluginOptions {
  readonly config: Readonly<RateLimitConfig>
  /** Shared counters across instances; omitted: in-process counters. */
  readonly redisUrl?: string | undefined
  /** Requests whose path starts with this are limited. Default `/api/v1/`. */
  readonly prefix?: string
  /** Called for each request the failed-authentication limit refuses (audit aggregation). */
  readonly onRefused?: (request: FastifyRequest) => void
}

type PolicyName = 'per-token' | 'per-tenant' | 'failed-auth'

/** One policy: a key per request and @fastify/rate-limit's fixed-window counter store. */
interface Limiter {
  readonly name: PolicyName
  readonly quota: number
  readonly windowSec: number
  /**
   * Counts a hit (`increment: false`: only reads) and calls back with the policy's state:
   * synchronously with the in-process store, after the round trip with Redis.
   */
  check(request: FastifyRequest, increment: boolean, callback: CheckCallback): void
}

interface Checked {
  readonly state: PolicyState
  /** More hits than the quota in this window (this request is over the limit). */
  readonly exceeded: boolean
  /** Exactly the quota: this request was the last one allowed. */
  readonly atLimit: boolean
}

type CheckCallback = (error: Error | null, checked?: Checked) => void
type Done = (error?: Error) => void

/** IPv6 clients are grouped per /64, the block one subscriber usually controls. */
const IPV6_SUBNET = 64
/** Credentials that authenticated within this long may try again from a throttled address. */
const KNOWN_CREDENTIAL_MAX_AGE_MS = 3_600_000
const KNOWN_CREDENTIAL_MAX_ENTRIES = 50_000
const LIMITED = Symbol('tokengate.rateLimited')
const DIGEST = Symbol('tokengate.credentialDigest')
const ADDRESS_KEY = Symbol('tokengate.addressKey')

declare module 'fastify' {
  interface FastifyRequest {
    [LIMITED]?: boolean
    [DIGEST]?: string
    [ADDRESS_KEY]?: string
  }
}

/**
 * Rate limits on the protected prefix, counted by @fastify/rate-limit's fixed-window stores
 * (Redis when `redisUrl` is set, see limits-store.ts) and answered as problem+json 429 with
 * `Retry-After` and one `RateLimit-Policy`/`RateLimit` pair. Register it *before* the auth
 * plugin:
 *
 * 1. before every authentication (the auth plugin calls the gate): an address over its
 *    failed-authentication limit gets 429 without any verification, unless it presents a
 *    credential this instance verified recently (`KnownCredentials`);
 * 2. right after authentication, in the auth plugin's `onRequest` (the last one, so before
 *    the body is read): per-token, then per-tenant;
 * 3. `onSend`: every 401 counts one failure against the client address.
 *
 * Where this goes around the library: it calls the library's stores (`incr`/`read`, as its
 * own `createRateLimit` does) and builds the response itself, because the library's hooks
 * emit the older `RateLimit-Limit/-Remaining/-Reset` fields, one set per limiter, and
 * throw an error instead of answering. Why not `createRateLimit()`: it is an async function
 * that awaits the key generator and wraps the store's callback in a promise, so each of the
 * three checks cost several promise hops even when the count is a synchronous in-process
 * Map update. The hooks below are callback-style: with the in-process store a request goes
 * through all of them without a single promise (~29 µs of rate limiting per request before,
 * measured with wrk; see bench/README.md), and with Redis they continue when the reply
 * arrives, exactly as before.
 *
 * @example
 * await app.register(rateLimitPlugin, { config: config.rateLimit, redisUrl: config.redisUrl })
 * await app.register(tokengatePlugin, { authenticate })
 */
const plugin: FastifyPluginAsync<RateLimitPluginOptions> = async (fastify, options) => {
  const { config } = options
  if (!config.enabled) return
  const prefix = options.prefix ?? `${API_PREFIX}/`
  const exact = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix

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

  const limiter = (
    name: PolicyName,
    settings: { max: number; windowSec: number },
    keyGenerator: (request: FastifyRequest) => string,
  ): Limiter | undefined => {
    if (settings.max === 0) return undefined
    const store = root.child({ policy: name })
    const max = settings.max
    const windowMs = settings.windowSec * 1000
    return {
      name,
      quota: max,
      windowSec: settings.windowSec,
      check(request, increment, callback) {
        const counted = (error: Error | null, result?: CounterResult) => {
          if (error || !result) return callback(error ?? new Error('rate-limit store: no result'))
          // The same arithmetic as the library's `createRateLimit` result.
          const remaining = Math.max(0, max - result.current)
          const exceeded = result.current > max
          const state: PolicyState = {
            name,
            quota: max,
            windowSec: settings.windowSec,
            remaining,
            resetSec:
              result.ttl > 0 ? Math.max(1, Math.ceil(result.ttl / 1000)) : settings.windowSec,
          }
          callback(null, { state, exceeded, atLimit: remaining === 0 && !exceeded })
        }
        const key = keyGenerator(request)
        if (increment) store.incr(key, counted, windowMs, max)
        else store.read(key, counted, windowMs, max)
      },
    }
  }

  const perToken = limiter('per-token', config.perToken, (r) => tokenKey(r.principal))
  const perTenant = limiter('per-tenant', config.perTenant, (r) => r.principal?.tenantId ?? '')
  const failedAuth = limiter('failed-auth', config.failedAuth, addressKeyOf)
  const known = new KnownCredentials(KNOWN_CREDENTIAL_MAX_ENTRIES, KNOWN_CREDENTIAL_MAX_AGE_MS)

  if (failedAuth) {
    // Called by the auth plugin before *every* call of authenticate, whatever hook or URL
    // spelling led there (`/api/v%31/me`, absolute-form targets, routes matched only after
    // decoding): a gate in front of a path-prefix test is skipped by any spelling the test
    // does not know, and each such request then paid full verification and an audit row.
    const gate = (request: FastifyRequest, reply: FastifyReply, next: Done) => {
      // A credential verified recently on this instance may always try, so it skips the
      // counter read (one Redis round trip saved for returning clients). Why: an attacker
      // sharing a NAT or proxy with a legitimate token holder must not lock that holder
      // out. The key is the address, so other addresses never notice an attack either.
      const digest = digestOf(request)
      if (digest && known.has(digest, Date.now())) return next()
      failedAuth.check(request, false, (error, checked) => {
        if (error || !checked) return next(error ?? undefined)
        if (checked.state.remaining > 0) return next()
        // Over the limit: refused before verification. Why not verify and answer 429 only
        // on failure: the limit exists to stop paying for signature checks, store lookups
        // and audit writes on behalf of a guessing client. (Answering, it does not call
        // `next`.)
        options.onRefused?.(request)
        sendRateLimited(request, reply, checked.state)
      })
    }
    fastify.decorate(GATE_FAILED_AUTH, gate)
    fastify.addHook('onSend', (request, reply, payload, done) => {
      if (reply.statusCode !== 401 || !request.authFailure) return done(null, payload)
      // A credential that stopped working (revoked, expired) loses its pass at once.
      const digest = digestOf(request)
      if (digest) known.forget(digest)
      failedAuth.check(request, true, (error, checked) => {
        if (error || !checked) return done(error ?? new Error('rate-limit store: no result'))
        const { state, atLimit } = checked
        if (atLimit) {
          request.log.warn(
            { clientAddress: request.ip, policy: state.name, windowSec: state.windowSec },
            'failed-authentication limit reached; unverified attempts from this address get 429',
          )
        }
        reply.headers(rateLimitHeaders(state))
        done(null, payload)
      })
    })
  }

  if (perToken || perTenant || failedAuth) {
    /** Calls `done` to continue, or answers 429 and does not. */
    const limitPrincipal = (request: FastifyRequest, reply: FastifyReply, done: Done) => {
      if (!request.principal || request[LIMITED]) return done()
      request[LIMITED] = true
      const digest = failedAuth && digestOf(request)
      if (digest) known.remember(digest, Date.now())
      // Token first, and the tenant counted only when the token is within its limit: one
      // runaway token must not spend its tenant's allowance and starve the other tokens.
      const afterTenant = (token: Checked | undefined, tenant: Checked | undefined) => {
        if (tenant?.exceeded) return void sendRateLimited(request, reply, tenant.state)
        const shown = token ? mostConstraining(token.state, tenant?.state) : tenant?.state
        if (shown) reply.headers(rateLimitHeaders(shown))
        done()
      }
      const afterToken = (token: Checked | undefined) => {
        if (token?.exceeded) return void sendRateLimited(request, reply, token.state)
        if (!perTenant) return afterTenant(token, undefined)
        perTenant.check(request, true, (error, tenant) =>
          error ? done(error) : afterTenant(token, tenant),
        )
      }
      if (!perToken) return afterToken(undefined)
      perToken.check(request, true, (error, token) => (error ? done(error) : afterToken(token)))
    }
    // Why not a `preParsing` hook of its own: the auth plugin calls this from its `onRequest`
    // right after a successful authentication (the last `onRequest` hook, so the same point
    // in the request as `preParsing` was, before routing and before the body), sparing every
    // request one hook step. Synchronous with the in-process store, after the round trip
    // with Redis, as before.
    fastify.decorate(LIMIT_PRINCIPAL, limitPrincipal)
    // Defence in depth, like the auth plugin's own preHandler: a request authenticated only
    // there (a URL the prefix test missed) is limited too. Route-level hooks run after the
    // auth plugin's global preHandler, so the principal is known by then.
    fastify.addHook('onRoute', (route) => {
      if (!route.url.startsWith(exact)) return
      const hooks = route.preHandler
      const own = (request: FastifyRequest, reply: FastifyReply, done: Done) =>
        limitPrincipal(request, reply, done)
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
  // A repeated JWT has the same principal object each time (authenticate.ts jwtPrincipal).
  const known = jwtPrincipalKeys.get(principal)
  if (known !== undefined) return known
  const identity = `${principal.issuer ?? ''}\n${principal.tenantId}\n${principal.subject}`
  let key = jwtKeys.get(identity)
  if (key === undefined) {
    key = `jwt:${hash('sha256', identity, 'base64url').slice(0, 27)}`
    // Bounded like the verified-token cache; a full map starts over (one hash per caller).
    if (jwtKeys.size >= MAX_JWT_KEYS) jwtKeys.clear()
    jwtKeys.set(identity, key)
  }
  jwtPrincipalKeys.set(principal, key)
  return key
}

const jwtPrincipalKeys = new WeakMap<Principal, string>()

/**
 * Per-token keys of recent JWT callers by identity: a SHA-256 per request was a visible share
 * of a cached JWT request's profile, a Map lookup of the same string is a fraction of it.
 * Only digests and the (non-secret) identity are held, never a token.
 */
const jwtKeys = new Map<string, string>()
const MAX_JWT_KEYS = 10_000

/**
 * The failed-authentication key of the request's address, computed once per request (a 401
 * reads and then counts it). IPv6 addresses are grouped per /64 by the library's
 * `normalizeIP`; an IPv4 address (no `:`) is its own key, which spares the library's IPv6
 * test, a large regular expression, on every request of a 401 flood.
 */
function addressKeyOf(request: FastifyRequest): string {
  let key = request[ADDRESS_KEY]
  if (key === undefined) {
    const ip = request.ip
    key = ip.includes(':') ? normalizeIP(ip, IPV6_SUBNET) : ip
    request[ADDRESS_KEY] = key
  }
  return key
}

/**
 * The request's credential digest, computed at most once per request. For a `Bearer <token>`
 * value it is the token's SHA-256 (hex, token-digest.ts), which authentication then reuses
 * as a PAT's store key or a JWT's cache key instead of hashing the token again; any other
 * value gets `credentialDigest` (base64url, so the two kinds of key never collide).
 */
function digestOf(request: FastifyRequest): string | undefined {
  if (request[DIGEST] !== undefined) return request[DIGEST]
  const authorization = request.headers.authorization
  if (!authorization) return undefined
  request[DIGEST] = tokenDigestOf(request)?.sha256Hex ?? credentialDigest(authorization)
  return request[DIGEST]
}

function sendRateLimited(request: FastifyRequest, reply: FastifyReply, state: PolicyState) {
  return sendResponse(reply, rateLimitedResponse(state, String(request.id)))
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
  // Loaded on demand: a server without `redisUrl` never loads the Redis client.
  const { Redis } = await import('ioredis')
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

export const rateLimitPlugin = fp(plugin, { fastify: '5.x', name: 'tokengate-rate-limit' })
export default rateLimitPlugin
