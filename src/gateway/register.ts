import type { FastifyInstance, FastifyRequest } from 'fastify'
import { auditRecord } from '../auth/audit-events.ts'
import type { AuthContext } from '../auth/auth-context.ts'
import type { Config } from '../config/schema.ts'
import { loggablePath } from '../http/log-safe.ts'
import { v1Routes } from '../server/routes/v1/index.ts'
import { createUpstreamAdmission } from './admission.ts'
import { effectiveHeaderName, IDENTITY_PREFIX } from './headers.ts'
import type { IdentityTokenSigner } from './identity-token.ts'
import type { PolicyDecision } from './policy-matcher.ts'
import { policyMatcherOf } from './policy-reload.ts'
import { createProxyHandler } from './proxy.ts'
import { createUpstreamPool } from './upstream.ts'

export type GatewayConfig = NonNullable<Config['gateway']>

export interface RegisterGatewayOptions {
  readonly gateway: Readonly<GatewayConfig>
  readonly auth: AuthContext
  /** The data directory (keys of the optional internal token live there). */
  readonly dataDir: string
  /** Signs the identity JWT sent upstream as `X-Auth-Token` (identity-token.ts); optional. */
  readonly identityToken?: IdentityTokenSigner | undefined
}

/**
 * Mounts gateway mode on a server built by `buildServer`: every `/api/v1/*` request that no
 * built-in route answers is checked against the route policy and proxied to the upstream.
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
  const { gateway, auth } = options
  const matcher = await policyMatcherOf(
    app,
    gateway.policyFile,
    gateway.policyStore ? auth.store : undefined,
  )
  const upstream = parseUpstream(gateway.upstream)
  const reserved = new Set(v1Routes.map((route) => firstSegment(route.path)))
  const pool = createUpstreamPool(upstream.origin, {
    timeoutMs: gateway.timeoutMs,
    connections: gateway.connections,
  })
  app.addHook('onClose', () => pool.destroy())
  const handler = createProxyHandler({
    basePath: upstream.pathname === '/' ? '' : upstream.pathname.replace(/\/$/, ''),
    timeoutMs: gateway.timeoutMs,
    stripAuthorization: gateway.stripAuthorization,
    forwardHeaders: forwardHeadersOf(gateway),
    forwardedHost: gateway.forwardedHost,
    admission: createUpstreamAdmission({
      connections: gateway.connections,
      perTenant: gateway.maxInFlightPerTenant,
      perToken: gateway.maxInFlightPerToken,
      waitMs: gateway.connectionWaitMs,
    }),
    uploadPace: { idleMs: gateway.bodyTimeoutMs, minBytesPerSec: gateway.minUploadBytesPerSec },
    matcher,
    reserved,
    onRefused: (request, decision) => auditRefusal(auth, request, decision),
    internalToken: options.identityToken?.sign,
    pool,
    upstream,
  })

  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    // The body stays the raw request stream; the upstream exchange pipes it through.
    scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
    scope.all('/api/v1/*', handler)
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

/** The operator's allowlist; identity headers can never be on it. */
function forwardHeadersOf(gateway: Readonly<GatewayConfig>): ReadonlySet<string> {
  const names = gateway.forwardHeaders.split(',').filter((name) => name !== '')
  for (const name of names) {
    if (effectiveHeaderName(name).startsWith(IDENTITY_PREFIX)) {
      throw new Error(
        `gateway.forwardHeaders: ${name} is an identity header; it is never forwarded`,
      )
    }
  }
  return new Set(names)
}

function firstSegment(path: string): string {
  return path.split('/')[1]?.toLowerCase() ?? ''
}

export function auditRefusal(
  auth: AuthContext,
  request: FastifyRequest,
  decision: PolicyDecision,
): void {
  const principal = request.principal
  auth.audit.write(
    auditRecord(
      {
        type: 'auth.forbidden',
        tenantId: principal?.tenantId ?? null,
        outcome:
          decision.outcome === 'forbidden'
            ? 'insufficient_permission'
            : `gateway_${decision.outcome}`,
        details: {
          method: request.method,
          path: loggablePath(request.url),
          ...('rule' in decision && decision.rule ? { policyLine: decision.rule.line } : {}),
        },
      },
      {
        actor: principal?.fingerprint ?? null,
        clientAddress: request.ip,
        requestId: String(request.id),
      },
    ),
  )
}
