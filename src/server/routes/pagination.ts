import type { Config } from '../../config/schema.ts'
import type { PageRequest } from '../../stores/store.ts'

/** A 400 answer about one request field, rendered as problem+json by the error handler. */
export class RequestFieldError extends Error {
  override readonly name = 'RequestFieldError'
  readonly field: string
  constructor(field: string, message: string) {
    super(message)
    this.field = field
  }
}

/** Applies the operator's page-size policy to a validated `{ limit?, cursor? }` query. */
export function pageRequest(
  query: { limit?: number; cursor?: string },
  pagination: Config['pagination'],
): PageRequest {
  const limit = query.limit ?? pagination.defaultLimit
  if (limit > pagination.maxLimit) {
    throw new RequestFieldError('querystring/limit', `must be <= ${pagination.maxLimit}`)
  }
  return { limit, cursor: query.cursor }
}
