import type { FastifyInstance } from 'fastify'
import type { PolicyMatcher } from '../auth/policy/matcher.ts'
import { policyInForce, type StoredPolicySource } from '../auth/policy/reload.ts'
import type { Tracing } from '../auth/tracing.ts'
import type { Config } from '../config/schema.ts'
import { asciiLowerCase, canonicalRequestTarget } from '../http/request-target.ts'
import { createUpstreamAdmission } from './admission.ts'
import { createProxyHandler } from './proxy.ts'
import { createUpstreamPool } from './upstream.ts'

export type GatewayConfig = NonNullable<Config['gateway']>

export interface RegisterGatewayOptions {
  readonly gateway: Readonly<GatewayConfig>
  /**
   * First path segments below `/api/v1/` that belong to the server's built-in routes: the
   * upstream never gets them, in any spelling (`/api/v1/Tokens`, `/api/v%31/tokens/x`).
   */
  readonly reservedNames: readonly string[]
  /** The store the policy is read from with `gateway.policyStore` (change-log reloads). */
  readonly policyStore?: StoredPolicySource | undefined
  /** With `tracing.enabled`: the undici interceptor that traces each upstream exchange. */
  readonly traceUpstream?: Tracing['upstream'] | undefined
}

/**
 * Mounts gateway mode on a server built by `buildServer`: every `/api/v1/*` request that no
 * built-in route answers is decided by the gate with the route policy (the route's
 * `config.access`), then proxied to the upstream with the identity headers.
 *
 * - The policy file is loaded and validated here, so a bad file stops the start-up with
 *   every problem and its line (`PolicyError`); no policy file means the secure default
 *   (authentication required, no permission). SIGHUP reloads the file; a bad edit is
 *   logged and the last good policy stays (`policy-reload.ts`).
 * - The proxy lives in its own encapsulated context whose only body parser passes the raw
 *   request stream through: uploads are streamed to the upstream, never buffered, and the
 *   built-in routes keep their JSON parsing and body limit.
 * - An undici keep-alive pool (`upstream.ts`), dispatched to directly; certificates of an
 *   `https` upstream are verified; no retries (a retry on a loaded upstream only adds load).
 *
 * Throws when the policy file is invalid or the upstream URL is unusable.
 */
export async function registerGateway(
  app: FastifyInstance,
  options: RegisterGatewayOptions,
): Promise<void> {
  const { gateway } = options
  const policy = await policyInForce(gateway.policyFile, app.log, options.policyStore)
  app.addHook('onClose', (_instance, done) => {
    policy.close()
    done()
  })
  const reserved = new Set(options.reservedNames.map(asciiLowerCase))
  const matcher = withoutReserved(policy.matcher, reserved)
  const upstream = parseUpstream(gateway.upstream)
  const pool = createUpstreamPool(upstream.origin, {
    timeoutMs: gateway.timeoutMs,
    connections: gateway.connections,
  })
  app.addHook('onClose', () => pool.destroy())
  const handler = createProxyHandler({
    basePath: upstream.pathname === '/' ? '' : upstream.pathname.replace(/\/$/, ''),
    timeoutMs: gateway.timeoutMs,
    stripAuthorization: gateway.stripAuthorization,
    forwardHeaders: new Set(gateway.forwardHeaders),
    forwardedHost: gateway.forwardedHost,
    admission: createUpstreamAdmission({
      connections: gateway.connections,
      perTenant: gateway.maxInFlightPerTenant,
      perToken: gateway.maxInFlightPerToken,
      waitMs: gateway.connectionWaitMs,
    }),
    uploadPace: { idleMs: gateway.bodyTimeoutMs, minBytesPerSec: gateway.minUploadBytesPerSec },
    pool: options.traceUpstream ? pool.compose(options.traceUpstream(upstream.origin)) : pool,
    upstream,
  })

  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    // The body stays the raw request stream; the upstream exchange pipes it through.
    scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
    const access = { policy: matcher, identity: true, audience: upstream.origin }
    scope.all('/api/v1/*', { config: { access } }, handler)
  })
}

function parseUpstream(value: string): URL {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    throw new Error('gateway.upstream is not a valid URL')
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error('gateway.upstream must be an http:// or https:// URL')
  }
  if (url.search || url.hash || url.username || url.password) {
    throw new Error('gateway.upstream must not carry a query, fragment or credentials')
  }
  return url
}

/**
 * The policy as the gateway applies it: a built-in route's name (and anything outside
 * `/api/v1`) is denied, answered as an unknown path, whatever the method or spelling, so the
 * upstream can never shadow a built-in route. The path is read once, on the one decoded
 * reading of `canonicalRequestTarget`; an ambiguous spelling is the policy's 400.
 */
function withoutReserved(policy: PolicyMatcher, reserved: ReadonlySet<string>): PolicyMatcher {
  return {
    decide(method, path, principal) {
      const target = canonicalRequestTarget(path)
      if (!target.ok) return { outcome: 'bad_path', reason: target.reason }
      // Indexed, not destructured: array destructuring runs the iterator protocol per request.
      const segments = target.segments
      const api = segments[0]
      const version = segments[1]
      const first = segments[2]
      const outside =
        api === undefined ||
        asciiLowerCase(api) !== 'api' ||
        version === undefined ||
        asciiLowerCase(version) !== 'v1'
      if (outside || (first !== undefined && reserved.has(asciiLowerCase(first)))) {
        return { outcome: 'deny', rule: undefined }
      }
      return policy.decide(method, path, principal, segments)
    },
  }
}
