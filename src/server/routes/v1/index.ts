import type { V1Route } from '../route.ts'
import { auditEventsRoute } from './audit-events.ts'
import { meRoute } from './me.ts'
import { createOpenApiRoute } from './openapi.ts'
import { tokensGetRoute } from './tokens-get.ts'
import { tokensListRoute } from './tokens-list.ts'
import { tokensRevokeRoute } from './tokens-revoke.ts'

/** Every built-in `/api/v1` endpoint, in documentation order. */
export const v1Routes: readonly V1Route[] = [
  meRoute,
  tokensListRoute,
  tokensGetRoute,
  tokensRevokeRoute,
  auditEventsRoute,
  createOpenApiRoute(() => v1Routes),
]
