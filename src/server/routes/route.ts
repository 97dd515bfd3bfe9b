import type { FastifyReply, FastifyRequest } from 'fastify'
import type { AuthContext } from '../../auth/auth-context.ts'
import { InvalidCursorError } from '../../auth/operations.ts'
import type { Config } from '../../config/schema.ts'
import type { Page, PageRequest } from '../../stores/store.ts'
import { pageRequest, RequestFieldError } from './pagination.ts'

/** What a built-in route handler may use. */
export interface RouteContext {
  readonly auth: AuthContext
  readonly config: Readonly<Config>
}

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'

/**
 * One built-in `/api/v1` endpoint: its contract (used both by Fastify for validation and by
 * the OpenAPI generator) and its handler. One file per endpoint under `routes/v1/`.
 */
export interface V1Route {
  readonly operationId: string
  readonly method: HttpMethod
  /** Path below `/api/v1`, Fastify syntax (`/tokens/:id`). */
  readonly path: string
  readonly summary: string
  readonly description?: string
  /** Permissions the gate enforces before the handler (403 otherwise). */
  readonly permissions: readonly string[]
  readonly schema: {
    readonly params?: object
    readonly querystring?: object
    readonly response: Readonly<Record<number, object>>
  }
  /** The body, or a promise of it (a value needs no promise: Fastify sends it at once). */
  readonly handler: (
    context: RouteContext,
  ) => (request: FastifyRequest, reply: FastifyReply) => unknown
}

/** Reads `request.principal`, which the gate guarantees for every `/api/v1` route. */
export function principalOf(request: FastifyRequest) {
  const principal = request.principal
  if (!principal) throw new Error('bug: /api/v1 route reached without a principal')
  return principal
}

/**
 * Wraps a store call so an unreachable store becomes 503, never a 500 with its message;
 * a cursor the store did not issue is the caller's mistake (400).
 */
export async function fromStore<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call()
  } catch (error) {
    if (error instanceof InvalidCursorError) {
      throw new RequestFieldError('querystring/cursor', 'is not a cursor this API returned')
    }
    throw new StoreUnavailableError(error)
  }
}

export class StoreUnavailableError extends Error {
  override readonly name = 'StoreUnavailableError'
  constructor(cause: unknown) {
    super('store unavailable', { cause })
  }
}

/**
 * The body of a tenant-scoped list endpoint: the caller's tenant, the operator's page-size
 * policy, one store call (503 / 400 as `fromStore` decides), and each item mapped to its
 * public view.
 */
export async function listForTenant<T, V>(
  request: FastifyRequest,
  pagination: Config['pagination'],
  list: (tenantId: string, page: PageRequest) => Promise<Page<T>>,
  view: (item: T) => V,
): Promise<{ items: V[]; nextCursor: string | null }> {
  const { tenantId } = principalOf(request)
  const page = pageRequest(request.query as { limit?: number; cursor?: string }, pagination)
  const result = await fromStore(() => list(tenantId, page))
  return { items: result.items.map(view), nextCursor: result.nextCursor }
}
