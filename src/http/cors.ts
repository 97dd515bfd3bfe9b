/**
 * tokengate's CORS answer (DESIGN.md "Browsers"): which methods and request headers a
 * configured origin may use, which response headers it may read, and the preflight answer.
 * The API port registers @fastify/cors with these lists; the decision API answers a
 * preflight with `preflightHeaders`, so a browser gets the same answer through a proxy.
 */

export const CORS_METHODS: readonly string[] = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE']
export const CORS_ALLOWED_HEADERS: readonly string[] = [
  'Authorization',
  'X-Tenant-Id',
  'Content-Type',
  'X-Request-Id',
]
export const CORS_EXPOSED_HEADERS: readonly string[] = [
  'X-Request-Id',
  'WWW-Authenticate',
  'Retry-After',
  'RateLimit',
  'RateLimit-Policy',
]

export interface CorsSettings {
  /** The configured origins (`server.cors.origins`), exact `scheme://host[:port]`. */
  readonly origins: ReadonlySet<string>
  readonly maxAgeSec: number
}

/** `server.cors` as settings: the origins as a set. */
export function corsSettings(cors: {
  readonly origins: readonly string[]
  readonly maxAgeSec: number
}): CorsSettings {
  return { origins: new Set(cors.origins), maxAgeSec: cors.maxAgeSec }
}

/** A CORS preflight (Fetch standard): `OPTIONS` with `Origin` and a requested method. */
export function isPreflight(
  method: string,
  origin: string | undefined,
  requestMethod: string | undefined,
): boolean {
  return method === 'OPTIONS' && origin !== undefined && requestMethod !== undefined
}

/**
 * The headers of the 204 answering a preflight, as the API port sends them: for a configured
 * origin the `Access-Control-*` set; for any other only `Vary: Origin` (none with CORS
 * off), which a browser reads as a refusal. A preflight carries no credentials, so it is never authenticated.
 */
export function preflightHeaders(
  origin: string | undefined,
  settings: CorsSettings,
): Record<string, string> {
  if (settings.origins.size === 0) return {}
  if (origin === undefined || !settings.origins.has(origin)) return { vary: 'Origin' }
  return {
    vary: 'Origin',
    'access-control-allow-origin': origin,
    'access-control-expose-headers': CORS_EXPOSED_HEADERS.join(', '),
    'access-control-allow-methods': CORS_METHODS.join(', '),
    'access-control-allow-headers': CORS_ALLOWED_HEADERS.join(', '),
    'access-control-max-age': String(settings.maxAgeSec),
  }
}
